// cert-manager's controller for the e2e suite (tests/tests/helm_cert_manager.rs),
// built from the github.com/cert-manager/cert-manager Go module
// (CERT_MANAGER_VERSION in ../../versions.env) by hack/build-cert-manager.sh.
//
// Why a main of our own: since v1.12 upstream's cmd/controller is a separate
// module (github.com/cert-manager/cert-manager/controller-binary) whose path
// does not match its folder in the repository and whose go.mod replaces the
// main module with ../../, so `go install .../cmd/controller@VERSION` cannot
// resolve it through a module proxy (the proxy answers 404). The main
// module, which the proxy does serve, holds every control loop in
// pkg/controller; upstream's cmd/controller/app only parses flags and a
// config file, runs leader election and a metrics server, and starts the
// registered control loops over one shared ContextFactory. This file does
// that last part, the way cmd/controller/app/controller.go does, for the
// loops the chart's Issuers need (SelfSigned and CA) and the Certificate
// life cycle: no ACME, Vault, Venafi, ingress or Gateway shims, no
// ClusterIssuers, no leader election, no metrics server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The control loops, registered by import (controller.Register in init).
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuer kinds the issuers loop can check (issuer.RegisterIssuer in init).
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// defaultControllers: upstream's names (cert-manager --controllers); every
// loop registered by the imports above.
const defaultControllers = "issuers,certificaterequests-approver,certificaterequests-issuer-ca," +
	"certificaterequests-issuer-selfsigned,certificates-trigger,certificates-issuing," +
	"certificates-key-manager,certificates-request-manager,certificates-readiness," +
	"certificates-revision-manager"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig (as upstream's --kubeconfig)")
	namespace := flag.String("namespace", "", "act on this namespace only (as upstream's --namespace); empty: all namespaces")
	controllers := flag.String("controllers", defaultControllers, "comma-separated control loops to run")
	workers := flag.Int("concurrent-workers", 5, "workers per control loop (upstream's default)")
	klog.InitFlags(flag.CommandLine)
	flag.Parse()

	logf.InitLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	err := run(ctx, *kubeconfig, *namespace, strings.Split(*controllers, ","), *workers)
	stop()
	logf.FlushLogs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager controller: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string, names []string, workers int) error {
	log := logf.FromContext(ctx)
	v := util.VersionInfo()
	log.Info("starting cert-manager controller (bloodraven e2e build)", "version", v.GitVersion, "go_version", v.GoVersion,
		"namespace", namespace, "controllers", names)

	// Upstream's defaults (internal/apis/config/controller/v1alpha1/defaults.go).
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          namespace,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: "kube-system",
		},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controller.SchedulerOptions{MaxConcurrentChallenges: 60},
	})
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	known := controller.Known()
	for _, name := range names {
		constructor, ok := known[name]
		if !ok {
			return fmt.Errorf("unknown controller %q (this build has: %s)", name, defaultControllers)
		}
		loop, err := constructor(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		g.Go(func() error {
			log.Info("starting control loop", "controller", name)
			return loop.Run(workers, ctx)
		})
	}
	// After the loops asked for their informers, as upstream does.
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	err = g.Wait()
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}

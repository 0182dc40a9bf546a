// cert-manager's cainjector for the e2e suite (tests/tests/helm_cert_manager.rs),
// built from the github.com/cert-manager/cert-manager Go module
// (CERT_MANAGER_VERSION in ../../versions.env) by hack/build-cert-manager.sh.
//
// Why a main of our own: as for ../controller, upstream's cmd/cainjector is
// a separate module (github.com/cert-manager/cert-manager/cainjector-binary)
// that a module proxy cannot serve. The injectors live in the main module
// (pkg/controller/cainjector); this file sets up the controller-runtime
// manager and registers them the way upstream's cmd/cainjector/app/controller.go
// does, for ValidatingWebhookConfigurations and MutatingWebhookConfigurations
// only (the chart has no APIService or conversion webhook), with the
// Certificate data source (cert-manager.io/inject-ca-from), no leader
// election and no metrics server.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (as upstream's --kubeconfig)")
	namespace := fs.String("namespace", "", "inject only from Certificates and Secrets of this namespace (as upstream's --namespace); empty: all")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])

	logf.InitLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = logf.NewContext(ctx, logf.Log, "cainjector")
	err := run(ctx, *kubeconfig, *namespace)
	stop()
	logf.FlushLogs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager cainjector: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace string) error {
	log := logf.FromContext(ctx)
	ctrl.SetLogger(log)
	v := util.VersionInfo()
	log.Info("starting cert-manager cainjector (bloodraven e2e build)", "version", v.GitVersion, "go_version", v.GoVersion,
		"namespace", namespace)

	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w", kubeconfig, err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	// As upstream: a namespace scopes the cache (cluster-scoped objects such
	// as webhook configurations are still watched cluster-wide) and the
	// reconcilers (an injectable whose source is in another namespace is
	// left alone).
	var namespaces map[string]cache.Config
	if namespace != "" {
		namespaces = map[string]cache.Config{namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// Secrets are read from the API server, not cached (as upstream).
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		// No metrics server: port "0" disables it.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("error creating manager: %w", err)
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     false,
			cainjector.CustomResourceDefinitionName:       false,
		},
	}); err != nil {
		return fmt.Errorf("failed to register injectors: %w", err)
	}
	return mgr.Start(ctx)
}

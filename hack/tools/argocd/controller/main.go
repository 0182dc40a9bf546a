// Argo CD's application controller for the e2e suite, built from the
// github.com/argoproj/argo-cd/v3 Go module (ARGOCD_VERSION in
// ../../versions.env) by hack/build-argocd.sh.
//
// Why a main of our own: upstream builds one binary (cmd/main.go) that
// dispatches on its own name to every Argo CD component, UI and CLI
// included. The e2e suite needs two of them to sync an Application: this
// controller and the repo server (../reposerver). Each main runs the
// component's own cobra command, with klog routed through Argo CD's
// logrus logger as upstream's cmd/main.go does. Left out: the API server
// and its UI, Dex (SSO), the notifications and ApplicationSet
// controllers, the commit server and the CLI.
package main

import (
	"os"

	"k8s.io/klog/v2"

	appcontroller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	"github.com/argoproj/argo-cd/v3/util/log"
)

func main() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
	if err := appcontroller.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

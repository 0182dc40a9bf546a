// Argo CD's repo server for the e2e suite (it renders the Helm charts the
// application controller syncs), built from the github.com/argoproj/argo-cd/v3
// Go module by hack/build-argocd.sh; see ../controller/main.go for why a
// main of our own and what is left out.
package main

import (
	"os"

	"k8s.io/klog/v2"

	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	"github.com/argoproj/argo-cd/v3/util/log"
)

func main() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
	if err := reposerver.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

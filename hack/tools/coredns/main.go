// CoreDNS for the local node, built from the github.com/coredns/coredns Go
// module with only the plugins the node's Corefile uses (the way CoreDNS
// documents building with a custom plugin set outside its tree). The full
// default build pulls in every cloud SDK (AWS, Azure, GCP): many more
// modules to download and minutes more to compile on two cores, for plugins
// the node never loads.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, registered by import. Keep in step with directives.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives in the order of CoreDNS's own plugin.cfg (the order in which a
// query passes through them), restricted to the plugins imported above.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }

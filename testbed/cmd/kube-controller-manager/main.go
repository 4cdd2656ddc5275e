// kube-controller-manager for the testbed, from k8s.io/kubernetes/cmd/kube-controller-manager.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() { os.Exit(cli.Run(app.NewControllerManagerCommand())) }

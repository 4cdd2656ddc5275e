// etcd for the testbed: upstream's own main, built from its module (go install of the module
// itself is refused because its go.mod has replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

//go:build tools

// The upstream mains built as they are (no wrapper needed): kwok and JobSet.
package testbed

import (
	_ "sigs.k8s.io/jobset"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)

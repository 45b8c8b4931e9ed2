// Command controllerscale measures the controller on a large fleet: N environments on KWOK
// nodes of the local cluster — time until all are Ready, the controller's resident memory,
// and its API writes per minute once idle (which must be 0). As a baseline in the same run,
// a plain client creates the same N claims and Pods on a fresh cluster and waits for them to
// run: the ratio says what the controller's ledger costs over raw object creation.
//
//	go run ./bench/controllerscale -n 10000
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "controllerscale:", err)
		os.Exit(1)
	}
}

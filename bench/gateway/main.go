// Command gateway measures what the gateway adds to the work it fronts, each figure a ratio
// against a baseline measured in the same run on the same local cluster, Pod and machine:
//
//   - Files read of 4 KiB through the gateway ÷ a raw pods/exec `cat` of the same file;
//   - StartCommand `true` ÷ a raw pods/exec `true`;
//   - Files write and read of 5 MiB ÷ a raw pods/exec stream of the same bytes;
//   - authorised unary RPCs per second (ValidateProfile) at concurrency 50 ÷ a bare grpc-go
//     mTLS echo server with the same certificates;
//   - each data call with helper sessions and with one exec per operation (a second gateway
//     with --sessions=false), small reads at concurrency 16 both ways, the pods/exec
//     requests the API server counts per 1,000 calls both ways, and what 1,000 idle
//     sessions hold in the gateway's pool.
//
// It starts a fresh local cluster, the controller and two gateways (the binaries of `make
// build`), ensures one environment and acquires a run, then alternates the sides' samples so
// that drift on the machine weighs on all alike.
//
//	go run ./bench/gateway        (or: make bench-gateway)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == echoServerCommand {
		if err := serveEcho(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "echo server:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == idleSessionsCommand {
		if err := holdIdleSessions(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "idle sessions:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench/gateway:", err)
		os.Exit(1)
	}
}

package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Bounds of the backlog test (#37's figure: 50 unread 8 MiB answers).
const (
	hoardProfile = "bulk"
	hoardAnswer  = 8 << 20
	hoardCalls   = 50
	// hoardHeapSlack is what the gateway's live heap may grow beyond the client's budget
	// while it holds the hoard: the waiting calls' goroutines and requests, HTTP/2 and TLS
	// buffers, the session's frames. Without the budget it grows by ~400 MiB.
	hoardHeapSlack = 24 << 20
	// hoardHeldSlack: answers count a little over what their fetch reserved (the message's
	// own fields and gRPC's prefix, counted as they are sent).
	hoardHeldSlack = 64 << 10
	// victimReads is the other client's sample, idle and under the hoard; its p99 must stay
	// within 2× (plus victimNoise, the timer and scheduling noise of a 2-core machine).
	victimReads = 200
	victimNoise = 5 * time.Millisecond
)

// One client asks for 50 answers of 8 MiB and reads none: the gateway holds at most the
// client's budget for it (its further calls wait, having fetched nothing), its live heap
// stays within the budget plus slack, another client's reads keep their latency, and when
// the hoarder goes, everything it held is freed.
func TestAClientThatDoesNotReadCannotExhaustTheGateway(t *testing.T) {
	bulk := fmt.Sprintf(`  %s:
    image: registry.example/python:3.13
    storageClass: kwok-volume
    storageSize: 1Gi
    memoryLimit: 64Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: %d
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: 5
`, hoardProfile, hoardAnswer)
	sys := startSystemProfiles(t, bulk, 1, "--profiling")
	gw := sys.gateways[0]
	hoarder := ensureReadyOn(t, sys.dial(t, "caller", 0), "alice", "hoard", hoardProfile)
	victim := ensureReadyOn(t, sys.dial(t, otherClient, 0), "bob", "work", profiletest.Name)
	ctx := clustertest.Context(t, 5*time.Minute)
	if _, err := hoarder.files(ctx, write("big.bin", string(bytes.Repeat([]byte{'x'}, hoardAnswer-64)))); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.files(ctx, write("small.txt", string(bytes.Repeat([]byte{'y'}, 4<<10)))); err != nil {
		t.Fatal(err)
	}
	idle := p99(t, ctx, victim)
	base := liveHeap(t, gw)
	callsBefore := gw.metric(t, `execplane_gateway_executor_calls_total{outcome="ok"}`)

	// The hoarder's own connection keeps HTTP/2 windows of 64 KiB and never reads.
	conn, err := sys.Dial("caller", 0, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	hoardCtx, stopHoard := context.WithCancel(ctx)
	defer stopHoard()
	req := &executionv1.FilesRequest{RunGrant: hoarder.runG, Environment: hoarder.envRef, Operation: read("big.bin")}
	for range hoardCalls {
		s, err := conn.NewStream(hoardCtx, &grpc.StreamDesc{}, executionv1grpc.ExecutionProviderService_Files_FullMethodName)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(req); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
	}
	// The answers the gateway fetched for the hoarder, as its executor calls count them (not
	// the ledger): the reads its budget holds (each reserves maxFileBytes + 1 MiB, then keeps
	// its answer's size), then no more.
	most := float64(backlog.DefaultClientBytes / (hoardAnswer + 1<<20))
	fetched := func() float64 {
		return gw.metric(t, `execplane_gateway_executor_calls_total{outcome="ok"}`) - callsBefore
	}
	clustertest.Eventually(t, time.Minute, "the reads the hoarder's budget holds are fetched, and the rest wait", func() bool {
		return fetched() >= most && gw.metric(t, "execplane_gateway_backlog_waits_total") >= 1
	})
	time.Sleep(time.Second) // what would pile up has had time to
	hoarded := fetched()
	if hoarded > most {
		t.Errorf("%.0f answers fetched for a client that reads none, over the %.0f its budget holds", hoarded, most)
	}
	held := gw.metric(t, "execplane_gateway_backlog_max_client_bytes")
	heap := liveHeap(t, gw)
	busy := p99(t, ctx, victim)
	t.Logf("hoard of %d × %d MiB unread: %.0f answers fetched, backlog %.1f MiB (budget %d MiB), live heap %+.1f MiB; other client p99 %s idle, %s under the hoard",
		hoardCalls, hoardAnswer>>20, hoarded, held/(1<<20), backlog.DefaultClientBytes>>20, float64(heap-base)/(1<<20), idle, busy)
	if held > backlog.DefaultClientBytes+hoardHeldSlack {
		t.Errorf("the gateway holds %.0f bytes for one client, over its budget of %d", held, backlog.DefaultClientBytes)
	}
	if heap-base > backlog.DefaultClientBytes+hoardHeapSlack {
		t.Errorf("the gateway's live heap grew by %d MiB, over the budget plus %d MiB", (heap-base)>>20, hoardHeapSlack>>20)
	}
	if busy > 2*idle+victimNoise {
		t.Errorf("another client's p99 read went from %s idle to %s under the hoard", idle, busy)
	}

	stopHoard()
	conn.Close()
	clustertest.Eventually(t, 30*time.Second, "the hoard is freed", func() bool {
		return gw.metric(t, "execplane_gateway_backlog_bytes") == 0
	})
}

// p99 is the 99th percentile of victimReads reads of the session's small file.
func p99(t *testing.T, ctx context.Context, s *session) time.Duration {
	t.Helper()
	var d []time.Duration
	for range victimReads {
		start := time.Now()
		if _, err := s.files(ctx, read("small.txt")); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[len(d)*99/100]
}

// liveHeap is the gateway's heap in use after a collection.
func liveHeap(t *testing.T, p *process) int64 {
	t.Helper()
	if err := p.CollectGarbage(t.Context()); err != nil {
		t.Fatal(err)
	}
	return int64(p.metric(t, "go_memstats_heap_inuse_bytes"))
}

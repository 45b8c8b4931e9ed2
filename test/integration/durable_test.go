package integration_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// reattachBytes is the output followed across a gateway's death (issue #21: 50 MB).
const reattachBytes = 50_000_000

// sdkAcross dials every gateway of the system behind one client, as a Service would: the
// first until it is gone, then the next.
func (s *system) sdkAcross(t *testing.T, name string) *client.Client {
	t.Helper()
	files, err := s.ClientFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	r := manual.NewBuilderWithScheme("gateways")
	var addrs []resolver.Address
	for _, g := range s.gateways {
		addrs = append(addrs, resolver.Address{Addr: g.Listen})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	c, err := client.Dial(client.Config{Address: "gateways:///all", CAFile: files.CAFile, CertFile: files.CertFile,
		KeyFile: files.KeyFile, ServerName: files.ServerName, DialOptions: []grpc.DialOption{grpc.WithResolvers(r)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The gateway serving a follow is killed mid-way: the SDK reattaches through the other
// gateway from the offsets it had, and the caller receives every byte of 50 MB exactly once
// (the checksum of what arrived is the checksum of what the command wrote).
func TestDurableOutputSurvivesTheGatewayServingIt(t *testing.T) {
	sys := startSystem(t, 2)
	c := sys.sdkAcross(t, "caller")
	ctx := clustertest.Context(t, 4*time.Minute)
	env, err := c.Ensure(ctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingID: "conv-1", Profile: profiletest.Name})
	if err != nil {
		t.Fatal(err)
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(ctx)
	// Written in pieces with pauses, so that the follow is under way when its gateway dies.
	cmd, err := run.Start(ctx, client.Command{Shell: `for i in $(seq 1 50); do head -c 1000000 /dev/urandom; sleep 0.05; done | tee out.bin`}, client.StartOptions{ID: "fifty"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	var got uint64
	var cursor client.Cursor
	killed := false
	var ended *client.CommandInfo
	for e, err := range run.Output(ctx, cmd.ID, client.Cursor{}) {
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if o := e.Output; o != nil {
			if o.Skipped != 0 || o.Offset != cursor.Stdout || o.Stream != client.Stdout {
				t.Fatalf("a chunk at %d (skipped %d) of %v after %d bytes", o.Offset, o.Skipped, o.Stream, cursor.Stdout)
			}
			sum.Write(o.Data)
			got += uint64(len(o.Data))
			cursor.Advance(*o)
			if !killed && got > 10_000_000 {
				sys.gateways[0].Kill() // the one pick-first chose
				killed = true
			}
		}
		if e.Ended != nil {
			ended = e.Ended
		}
	}
	if !killed || ended == nil || ended.State != executionv1.CommandState_COMMAND_STATE_SUCCEEDED || got != reattachBytes || ended.StdoutBytes != reattachBytes {
		t.Fatalf("killed %v, received %d bytes, ended %+v", killed, got, ended)
	}
	res, err := run.Run(ctx, client.Command{Shell: "sha256sum out.bin"})
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := strings.Cut(string(res.Stdout.Head), " ")
	if have := hex.EncodeToString(sum.Sum(nil)); have != want {
		t.Fatalf("the bytes received hash to %s, the command wrote %s", have, want)
	}
}

// peakRSS is a process's peak resident memory (VmHWM).
func peakRSS(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// gatewayGrowthBound is what streaming a gigabyte may add to the gateway's peak memory: it
// holds one follow answer (1 MiB) at a time, plus gRPC's and the exec stream's buffers.
const gatewayGrowthBound = 64 << 20

// A command writing 1 GiB, streamed: every byte is accounted for — received, or skipped
// because the spool keeps only head and tail — the total is exact, and the gateway's memory
// does not grow with the output.
func TestDurableGigabyteThroughTheGateway(t *testing.T) {
	sys := startSystem(t, 1)
	c := sys.sdk(t, "caller", 0)
	ctx := clustertest.Context(t, 4*time.Minute)
	env, err := c.Ensure(ctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingID: "conv-1", Profile: profiletest.Name})
	if err != nil {
		t.Fatal(err)
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(ctx)
	before := peakRSS(t, sys.gateways[0].PID())
	const total = 1 << 30
	var received, skipped uint64
	var ended *client.CommandInfo
	for e, err := range run.Stream(ctx, client.Command{Shell: "head -c 1073741824 /dev/zero"}, client.StreamOptions{}) {
		if err != nil {
			t.Fatalf("after %d bytes: %v", received, err)
		}
		if o := e.Output; o != nil {
			received += uint64(len(o.Data))
			skipped += o.Skipped
		}
		if e.Ended != nil {
			ended = e.Ended
		}
	}
	after := peakRSS(t, sys.gateways[0].PID())
	if ended == nil || ended.StdoutBytes != total || received+skipped != total || received < 64<<20 {
		t.Fatalf("received %d, skipped %d, ended %+v", received, skipped, ended)
	}
	if after > before+gatewayGrowthBound {
		t.Fatalf("the gateway's peak memory grew from %d to %d bytes", before, after)
	}
	t.Logf("1 GiB streamed: %d bytes received, %d skipped; gateway peak %d → %d MiB", received, skipped, before>>20, after>>20)
}

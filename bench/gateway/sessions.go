package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/podexec"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"

	"google.golang.org/protobuf/types/known/durationpb"
)

// Sizes of the session measurements the issue names.
const (
	// sessionConcurrency is the concurrency of the small reads on one environment (the
	// gateway's default per-environment bound).
	sessionConcurrency = 16
	// upgradeCalls is how many data calls the exec upgrades are counted over.
	upgradeCalls = 1000
)

// runRef is a run claim's grant and its environment.
type runRef struct {
	grant *executionv1.Grant
	ref   *executionv1.EnvironmentRef
}

// acquire ensures the bench environment, waits until it is ready and takes its run claim,
// returning the raw grant (both gateways honour it).
func acquire(ctx context.Context, sdk *client.Client, api executionv1grpc.ExecutionProviderServiceClient) (runRef, error) {
	owner := client.Owner{Issuer: "https://idp.example", Subject: "bench"}
	e, err := sdk.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: "bench", Profile: profileName})
	if err != nil {
		return runRef{}, err
	}
	if err := e.WaitReady(ctx); err != nil {
		return runRef{}, err
	}
	pOwner := &executionv1.Owner{Issuer: owner.Issuer, Subject: owner.Subject}
	a, err := api.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: pOwner, BindingId: "bench", Environment: e.Ref()})
	if err != nil {
		return runRef{}, err
	}
	r, err := api.AcquireRun(ctx, &executionv1.AcquireRunRequest{OperationId: "bench-acquire", EnvironmentGrant: a.GetEnvironmentGrant(),
		Environment: e.Ref(), RunId: "bench", Ttl: durationpb.New(client.MaxRunTTL)})
	if err != nil {
		return runRef{}, err
	}
	return runRef{grant: r.GetRunGrant(), ref: e.Ref()}, nil
}

// dataSide is one gateway's data calls under the run.
type dataSide struct {
	api executionv1grpc.ExecutionProviderServiceClient
	run runRef
}

func (d dataSide) files(ctx context.Context, op *executionv1.FileOperation) (*executionv1.FileResult, error) {
	r, err := d.api.Files(ctx, &executionv1.FilesRequest{RunGrant: d.run.grant, Environment: d.run.ref, Operation: op})
	return r.GetResult(), err
}

func (d dataSide) write(ctx context.Context, path string, content []byte) error {
	_, err := d.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(path), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
	return err
}

func (d dataSide) reader(path string, want []byte) func(context.Context) error {
	return func(ctx context.Context) error {
		r, err := d.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path)}}})
		if err == nil && !bytes.Equal(r.GetRead().GetContent(), want) {
			err = fmt.Errorf("read %s: %d bytes, not the %d written", path, len(r.GetRead().GetContent()), len(want))
		}
		return err
	}
}

// streamPiece is the content of one WriteFileStream message, as the SDK sends it.
const streamPiece = 256 << 10

// writeStream writes content through WriteFileStream, in pieces as the SDK sends them.
func (d dataSide) writeStream(ctx context.Context, path string, content []byte) error {
	st, err := d.api.WriteFileStream(ctx)
	if err != nil {
		return err
	}
	msg := &executionv1.WriteFileStreamRequest{RunGrant: d.run.grant, Environment: d.run.ref, Size: uint64(len(content)),
		Write: &executionv1.WriteFile{Path: []byte(path), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}
	for first := true; first || len(content) > 0; first = false {
		n := min(streamPiece, len(content))
		msg.Content, content = content[:n], content[n:]
		if err := st.Send(msg); err != nil {
			break // the gateway answered: CloseAndRecv says how
		}
		msg = &executionv1.WriteFileStreamRequest{}
	}
	_, err = st.CloseAndRecv()
	return err
}

// streamReader reads a file through ReadFileStream and checks what came.
func (d dataSide) streamReader(path string, want []byte) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := d.api.ReadFileStream(ctx, &executionv1.ReadFileStreamRequest{RunGrant: d.run.grant, Environment: d.run.ref,
			Read: &executionv1.ReadFile{Path: []byte(path)}})
		if err != nil {
			return err
		}
		got := make([]byte, 0, len(want))
		for {
			m, err := st.Recv()
			if err != nil {
				return err
			}
			if m.GetResult() != nil {
				break
			}
			got = append(got, m.GetContent()...)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("stream read %s: %d bytes, not the %d written", path, len(got), len(want))
		}
		return nil
	}
}

func (d dataSide) runTrue(ctx context.Context) error {
	r, err := d.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: d.run.grant, Environment: d.run.ref,
		Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"true"}}}}})
	if err == nil && r.GetResult().GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED {
		err = fmt.Errorf("true ended %s", r.GetResult().GetState())
	}
	return err
}

// measureConcurrentReads compares small reads at sessionConcurrency on one environment,
// with sessions and one exec per operation, alternating rounds.
func measureConcurrentReads(ctx context.Context, o options, sides [2]dataSide) (rates, error) {
	small := random(smallFile)
	if err := sides[0].write(ctx, "bench-concurrent", small); err != nil {
		return rates{}, err
	}
	var r rates
	for range o.rounds {
		s, err := throughput(ctx, sessionConcurrency, o.duration, sides[0].reader("bench-concurrent", small))
		if err != nil {
			return r, fmt.Errorf("with sessions: %w", err)
		}
		p, err := throughput(ctx, sessionConcurrency, o.duration, sides[1].reader("bench-concurrent", small))
		if err != nil {
			return r, fmt.Errorf("one exec per operation: %w", err)
		}
		r.gateway, r.baseline = append(r.gateway, s), append(r.baseline, p)
	}
	return r, nil
}

// upgrades are the pods/exec requests the API server counted over upgradeCalls data calls,
// each way.
type upgrades struct{ session, perExec float64 }

// measureUpgrades counts, from the API server's own apiserver_request_total, the pods/exec
// requests made while each gateway serves upgradeCalls small reads (the gateway with
// sessions starts from a closed pool: its first call opens the session).
func measureUpgrades(ctx context.Context, kube kubernetes.Interface, sides [2]dataSide) (upgrades, error) {
	small := random(smallFile)
	if err := sides[0].write(ctx, "bench-upgrades", small); err != nil {
		return upgrades{}, err
	}
	count := func(d dataSide) (float64, error) {
		before, err := execRequests(ctx, kube)
		if err != nil {
			return 0, err
		}
		read := d.reader("bench-upgrades", small)
		for range upgradeCalls {
			if err := read(ctx); err != nil {
				return 0, err
			}
		}
		after, err := execRequests(ctx, kube)
		return after - before, err
	}
	var u upgrades
	var err error
	if u.session, err = count(sides[0]); err != nil {
		return u, err
	}
	u.perExec, err = count(sides[1])
	return u, err
}

// execRequests is the API server's count of pods/exec requests, every verb.
func execRequests(ctx context.Context, kube kubernetes.Interface) (float64, error) {
	counts, err := devcluster.RequestCounts(ctx, kube)
	total := 0.0
	for k, v := range counts {
		if strings.HasSuffix(k, " pods/exec") {
			total += v
		}
	}
	return total, err
}

// idleCost is what the pool's idle sessions hold, per session.
type idleCost struct {
	Goroutines float64 `json:"goroutines"`
	HeapBytes  float64 `json:"heapBytes"`
	RSSBytes   float64 `json:"rssBytes"`
	N          int     `json:"n"`
}

// idleSessionsCommand is the hidden subcommand that holds the idle sessions in a process of
// its own — the local cluster's node endpoint runs in the benchmark's process, and its
// memory per stream must not count as the gateway's.
const idleSessionsCommand = "idle-sessions"

// measureIdleSessions runs idleSessionsCommand against the bench environment's executor Pod
// and returns what it measured.
func measureIdleSessions(ctx context.Context, kubeconfig, ns string, env *executionv1alpha1.ExecutionEnvironment, n int) (idleCost, error) {
	self, err := os.Executable()
	if err != nil {
		return idleCost{}, err
	}
	cmd := exec.CommandContext(ctx, self, idleSessionsCommand, "-kubeconfig", kubeconfig, "-namespace", ns,
		"-pod", env.Status.Pod.Name, "-pod-uid", string(env.Status.Pod.UID), "-n", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return idleCost{}, fmt.Errorf("%s: %w", idleSessionsCommand, err)
	}
	var c idleCost
	return c, json.Unmarshal(out, &c)
}

// holdIdleSessions opens n sessions with the gateway's own pool and executor to one
// executor Pod (as n environments' sessions would be: one key each), lets them go idle and
// prints, as JSON, the goroutines, heap in use and resident memory they hold, per session.
func holdIdleSessions(args []string) error {
	fs := flag.NewFlagSet(idleSessionsCommand, flag.ContinueOnError)
	kubeconfig, ns, pod, uid := fs.String("kubeconfig", "", ""), fs.String("namespace", "", ""), fs.String("pod", "", ""), fs.String("pod-uid", "", "")
	n := fs.Int("n", 1000, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: *kubeconfig, UserAgent: "bench-gateway-idle", QPS: 1000, Burst: 2000})
	if err != nil {
		return err
	}
	pe, err := podexec.NewExec(podexec.ExecConfig{HelperPath: devcluster.HelperImagePath}, clients.REST, *ns)
	if err != nil {
		return err
	}
	// Each target an environment of its own, whose view always shows it current.
	lookup := func(name string) *executionv1alpha1.ExecutionEnvironment {
		return &executionv1alpha1.ExecutionEnvironment{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
			Status: executionv1alpha1.ExecutionEnvironmentStatus{Phase: executionv1alpha1.PhaseReady, FenceState: executionv1alpha1.FenceHealthy,
				Pod:        &executionv1alpha1.ObjectIdentity{Name: *pod, UID: types.UID(*uid)},
				Conditions: []metav1.Condition{{Type: executionv1alpha1.ConditionReady, Status: metav1.ConditionTrue}}},
		}
	}
	pool := podexec.NewPool(podexec.PoolConfig{Idle: time.Hour}, pe, lookup)
	defer pool.Drain()
	op := &helperv1.Request{Limits: &helperv1.Limits{MaxFileBytes: 1 << 20, MaxCommandBytes: 1 << 16, MaxCommandMillis: 10_000},
		Operation: &helperv1.Request_File{File: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(".")}}}}}
	ctx := context.Background()
	// One session first, so that what every process holds once (the client, the
	// transport's caches) is in the baseline.
	if _, err := pool.Execute(ctx, podexec.TargetOf(lookup("warm")), op, 1<<20); err != nil {
		return err
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0, rss0 := runtime.NumGoroutine(), rss()
	for i := range *n {
		if _, err := pool.Execute(ctx, podexec.TargetOf(lookup(fmt.Sprintf("idle-%d", i))), op, 1<<20); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
	}
	if pool.Open() != *n+1 {
		return errors.New("the pool did not keep every session open")
	}
	time.Sleep(2 * time.Second) // idle: what a call left behind is garbage now
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := float64(*n)
	return json.NewEncoder(os.Stdout).Encode(idleCost{
		Goroutines: float64(runtime.NumGoroutine()-g0) / per,
		HeapBytes:  float64(m1.HeapInuse-m0.HeapInuse) / per,
		RSSBytes:   float64(rss()-rss0) / per,
		N:          *n,
	})
}

// rss is this process's resident memory in bytes (VmRSS), 0 when unknown.
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

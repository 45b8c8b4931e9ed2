package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/podexec"
)

// What the session ratios measure, said apart (docs/benchmarks.md): the headline compares a
// call on an open session with a fresh exec per sample — the exec setup a session avoids.
// Two more figures put it in its place: the first call on a new session (the cost a caller
// pays when no session is open), and a persistent raw exec (one exec stream, kept open,
// doing the same reads: what the session's transport costs against the least an exec can).
const (
	// coldIdle is the cold gateway's --session-idle; coldWait lets its pool's sweep (every
	// quarter of the idle bound) close the session before each sample.
	coldIdle = time.Second
	coldWait = 2 * time.Second
)

// sessionCost is one node's warm session, cold session and persistent raw exec samples of
// the 4 KiB read.
type sessionCost struct {
	warm, cold, persistent latencies
}

// measureSessionCost measures the 4 KiB read three more ways: warm (an open session),
// cold (the first call on a new session: a gateway whose sessions close after a second
// idle, each sample after two seconds of quiet) and a persistent raw exec (one stream of
// `sh` reading a path per line and cat-ing it, kept open across samples).
func measureSessionCost(ctx context.Context, n int, warm, cold dataSide, raw rawExec) (sessionCost, error) {
	small := random(smallFile)
	if err := warm.write(ctx, "bench-cold", small); err != nil {
		return sessionCost{}, err
	}
	var c sessionCost
	read := warm.reader("bench-cold", small)
	readCold := cold.reader("bench-cold", small)
	if err := read(ctx); err != nil {
		return c, err
	}
	for range n {
		if err := sleepCtx(ctx, coldWait); err != nil {
			return c, err
		}
		start := time.Now()
		if err := readCold(ctx); err != nil {
			return c, fmt.Errorf("cold session: %w", err)
		}
		c.cold = append(c.cold, time.Since(start))
		start = time.Now()
		if err := read(ctx); err != nil {
			return c, fmt.Errorf("warm session: %w", err)
		}
		c.warm = append(c.warm, time.Since(start))
	}
	p, err := raw.persistentCat(ctx)
	if err != nil {
		return c, err
	}
	defer p.close()
	for i := range n + max(n/10, 3) {
		start := time.Now()
		got, err := p.read("bench-cold", len(small))
		if err != nil {
			return c, fmt.Errorf("persistent exec: %w", err)
		}
		if !bytes.Equal(got, small) {
			return c, fmt.Errorf("persistent exec: %d bytes, not the %d written", len(got), len(small))
		}
		if i >= max(n/10, 3) {
			c.persistent = append(c.persistent, time.Since(start))
		}
	}
	return c, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// persistentExec is one exec stream into the executor container running a shell that cats
// each path it reads from stdin: the raw exec's cost without the exec's setup.
type persistentExec struct {
	in     *io.PipeWriter
	out    *io.PipeReader
	done   chan error
	cancel context.CancelFunc
}

func (r rawExec) persistentCat(ctx context.Context) (*persistentExec, error) {
	ctx, cancel := context.WithCancel(ctx)
	argv := []string{"sh", "-c", `while IFS= read -r p; do cat "$p"; done`}
	opts := &corev1.PodExecOptions{Container: executor.ContainerName, Command: argv, Stdin: true, Stdout: true, Stderr: true}
	url := r.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.namespace).Name(r.pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec).URL()
	exec, err := podexec.StreamExecutor(r.rest, url)
	if err != nil {
		cancel()
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &persistentExec{in: inW, out: outR, done: make(chan error, 1), cancel: cancel}
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: io.Discard})
		outW.CloseWithError(fmt.Errorf("the exec stream ended: %v", err))
		p.done <- err
	}()
	return p, nil
}

// read asks for path and reads its n bytes back.
func (p *persistentExec) read(path string, n int) ([]byte, error) {
	if _, err := io.WriteString(p.in, path+"\n"); err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(p.out, buf)
	return buf, err
}

func (p *persistentExec) close() {
	p.in.Close()
	p.cancel()
	<-p.done
}

// reportCost prints the session cost table: what the headline ratio measures, and against
// what else it could be measured.
func reportCost(w io.Writer, results []nodeResult) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	printed := false
	for _, r := range results {
		c := r.cost
		if c == nil {
			continue
		}
		if !printed {
			fmt.Fprintf(w, "\n| Files read 4 KiB | node | samples | warm session p50 / p90 (ms) | **cold session** (first call on a new session) p50 / p90 (ms) | **persistent raw exec** (one stream) p50 / p90 (ms) | warm ÷ persistent raw exec | cold ÷ warm |\n")
			fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|\n")
			printed = true
		}
		fmt.Fprintf(w, "| through the gateway | %s | %d | %s / %s | %s / %s | %s / %s | %.2f | %.1f |\n", r.node, len(c.warm),
			ms(c.warm.quantile(0.5)), ms(c.warm.quantile(0.9)), ms(c.cold.quantile(0.5)), ms(c.cold.quantile(0.9)),
			ms(c.persistent.quantile(0.5)), ms(c.persistent.quantile(0.9)), ratio(c.warm, c.persistent), ratio(c.cold, c.warm))
	}
}

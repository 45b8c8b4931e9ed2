package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// durableOutputBytes is what each command of the durable-output measurement writes: half the
// default spool, so that every byte is kept and streamed.
const durableOutputBytes = 32 << 20

// clockTicks is the kernel's USER_HZ, the unit of /proc/stat.
const clockTicks = 100

// durableResult compares a command writing durableOutputBytes streamed (RunCommand: spooled on
// the volume and followed) with the same command in the foreground (StartCommand: its output
// captured within the profile's cap), alternating, on the sessions gateway.
type durableResult struct {
	streamed, foreground       latencies
	streamedCPU, foregroundCPU []float64 // the machine's CPU seconds per command
}

func measureDurable(ctx context.Context, n int, d dataSide) (durableResult, error) {
	script := fmt.Sprintf("head -c %d /dev/zero", durableOutputBytes)
	spec := &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: script}}
	streamed := func(ctx context.Context) error {
		st, err := d.api.RunCommand(ctx, &executionv1.RunCommandRequest{RunGrant: d.run.grant, Environment: d.run.ref, Command: spec})
		if err != nil {
			return err
		}
		var got uint64
		for {
			ev, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return errors.New("the stream ended without the command's end")
			}
			if err != nil {
				return err
			}
			got += uint64(len(ev.GetOutput().GetData()))
			if e := ev.GetEnded(); e != nil {
				if e.GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED || got != durableOutputBytes {
					return fmt.Errorf("streamed: %d bytes, ended %s", got, e.GetState())
				}
				return nil
			}
		}
	}
	foreground := func(ctx context.Context) error {
		r, err := d.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: d.run.grant, Environment: d.run.ref, Command: spec})
		if err == nil && (r.GetResult().GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED || r.GetResult().GetStdout().GetTotalBytes() != durableOutputBytes) {
			err = fmt.Errorf("foreground: %v", r.GetResult())
		}
		return err
	}
	var res durableResult
	for i := range n + 2 { // two warm-up rounds
		for _, side := range []struct {
			call func(context.Context) error
			lat  *latencies
			cpu  *[]float64
		}{{streamed, &res.streamed, &res.streamedCPU}, {foreground, &res.foreground, &res.foregroundCPU}} {
			before, err := busyTicks()
			if err != nil {
				return res, err
			}
			start := time.Now()
			if err := side.call(ctx); err != nil {
				return res, err
			}
			took := time.Since(start)
			after, err := busyTicks()
			if err != nil {
				return res, err
			}
			if i >= 2 {
				*side.lat = append(*side.lat, took)
				*side.cpu = append(*side.cpu, float64(after-before)/clockTicks)
			}
		}
	}
	return res, nil
}

// busyTicks is the machine's non-idle CPU time so far, in clock ticks (/proc/stat's cpu line
// without idle and iowait): the whole data path — caller, gateway, API server, node, helper,
// supervisor — runs on this machine.
func busyTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy uint64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, err
		}
		busy += n
	}
	return busy, nil
}

func reportDurable(w io.Writer, results []nodeResult) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "\n| a command writing %d MiB | node | samples | p50 / p90 (ms) | MB/s through the gateway (p50) | machine CPU s per command (median) |\n|---|---|---|---|---|---|\n", durableOutputBytes>>20)
	for _, r := range results {
		if r.durable == nil {
			continue
		}
		d := r.durable
		mbps := float64(durableOutputBytes) / 1e6 / d.streamed.quantile(0.5).Seconds()
		fmt.Fprintf(w, "| RunCommand (streamed, spooled) | %s | %d | %s / %s | %.0f | %.3f |\n", r.node, len(d.streamed), ms(d.streamed.quantile(0.5)), ms(d.streamed.quantile(0.9)), mbps, median(d.streamedCPU))
		fmt.Fprintf(w, "| StartCommand (foreground, captured) | %s | %d | %s / %s | — | %.3f |\n", r.node, len(d.foreground), ms(d.foreground.quantile(0.5)), ms(d.foreground.quantile(0.9)), median(d.foregroundCPU))
		fmt.Fprintf(w, "| **streamed ÷ foreground** | %s | | **%.2f** (time) | | **%.2f** (CPU) |\n", r.node, ratio(d.streamed, d.foreground), median(d.streamedCPU)/median(d.foregroundCPU))
	}
}

package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/logging"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Bounds of the gateway's usage counting (docs/usage.md "Commands and bytes").
const (
	// usageSeriesIdle is how long a series is reported again after its last change: past a
	// leader's crash and a checkpoint, well within the controller's memory of it (two
	// hours), so that a series is never reported after the ledger forgot it.
	usageSeriesIdle = 30 * time.Minute
	// usageSeriesForget is when a series whose last counts no leader accepted is given up:
	// before the controller forgets it (two hours after its last change), so that a late
	// copy never counts again from zero. What it held is lost, and logged.
	usageSeriesForget = 90 * time.Minute
	// maxUsageBatch is the reports of one ReportUsage call (the control API's bound).
	maxUsageBatch = 1000
	// usageReportTimeout bounds one ReportUsage call; the next interval retries.
	usageReportTimeout = 10 * time.Second
)

// dataMethods are the calls whose messages are an environment's usage, and whether one
// started a command.
var dataMethods = map[string]bool{
	"Files": false, "StartCommand": true, "CommandStatus": false, "CancelCommand": false, "ListCommands": false,
	"RunCommand": true, "WatchCommand": false, "ReadFileStream": false, "WriteFileStream": false, "Terminal": true,
}

// usageKey is an environment incarnation.
type usageKey struct{ name, uid string }

// series is one environment's counts on this gateway process: cumulative, so that the
// controller folds only their increase and a report sent twice counts once.
type series struct {
	id                          string
	commands, bytesIn, bytesOut int64
	changedAt                   time.Time
	// acked are the counts of the last report the leader accepted.
	acked [3]int64
}

// usageCounter counts the data calls each environment served on this process and reports
// them to the controller's leader.
type usageCounter struct {
	control controlv1.ControlServiceClient
	log     hclog.Logger
	now     func() time.Time

	mu       sync.Mutex
	instance string
	next     int
	series   map[usageKey]*series
}

func newUsageCounter(control controlv1.ControlServiceClient, log hclog.Logger) *usageCounter {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &usageCounter{control: control, log: log.Named("usage"), now: time.Now, instance: hex.EncodeToString(b[:]), series: map[usageKey]*series{}}
}

// count adds one call's usage to its environment.
func (u *usageCounter) count(env *executionv1.EnvironmentRef, commands, in, out int64) {
	if u == nil || env.GetId() == "" || env.GetRevision() == "" {
		return
	}
	k := usageKey{env.GetId(), env.GetRevision()}
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.series[k]
	if s == nil {
		u.next++
		s = &series{id: u.instance + "-" + strconv.Itoa(u.next)}
		u.series[k] = s
	}
	s.commands += commands
	s.bytesIn += in
	s.bytesOut += out
	s.changedAt = u.now()
}

// Run reports every interval until ctx ends.
func (u *usageCounter) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.Report(ctx)
		}
	}
}

// Report sends the series that changed within usageSeriesIdle — again even when the leader
// accepted them, so that a leader that crashed before its checkpoint loses nothing — and
// forgets those idle longer whose last counts were accepted.
func (u *usageCounter) Report(ctx context.Context) {
	now := u.now()
	u.mu.Lock()
	var batch []*controlv1.UsageReport
	sent := map[string][3]int64{}
	for k, s := range u.series {
		counts := [3]int64{s.commands, s.bytesIn, s.bytesOut}
		idle := now.Sub(s.changedAt)
		if idle > usageSeriesIdle && s.acked == counts {
			delete(u.series, k)
			continue
		}
		if idle > usageSeriesForget {
			u.log.Warn("usage of an environment no leader accepted for too long: given up", logging.KeyEnvironment, k.name,
				logging.KeyCount, s.commands-s.acked[0])
			delete(u.series, k)
			continue
		}
		batch = append(batch, &controlv1.UsageReport{Environment: k.name, Revision: k.uid, Series: s.id,
			Commands: s.commands, BytesIn: s.bytesIn, BytesOut: s.bytesOut})
		sent[s.id] = counts
	}
	u.mu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), maxUsageBatch)
		u.send(ctx, batch[:n], sent)
		batch = batch[n:]
	}
}

func (u *usageCounter) send(ctx context.Context, batch []*controlv1.UsageReport, sent map[string][3]int64) {
	ctx, cancel := context.WithTimeout(ctx, usageReportTimeout)
	defer cancel()
	resp, err := u.control.ReportUsage(ctx, &controlv1.ReportUsageRequest{Caller: &controlv1.Caller{}, Reports: batch})
	if err != nil {
		if ctx.Err() == nil {
			u.log.Debug("usage report not taken; sent again at the next interval", logging.KeyError, err)
		}
		return
	}
	unknown := map[string]bool{}
	for _, id := range resp.GetUnknownSeries() {
		unknown[id] = true
	}
	u.log.Debug("usage reported", logging.KeyCount, len(batch))
	if len(unknown) > 0 {
		u.log.Debug("usage of environments the leader does not know: dropped", logging.KeyCount, len(unknown))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, s := range u.series {
		counts, ok := sent[s.id]
		switch {
		case !ok:
		case unknown[s.id]:
			delete(u.series, k) // the environment is gone: nothing will take its counts
		default:
			s.acked = counts
		}
	}
}

// envOf is the environment a data call's message names.
func envOf(m any) *executionv1.EnvironmentRef {
	switch r := m.(type) {
	case interface {
		GetEnvironment() *executionv1.EnvironmentRef
	}:
		return r.GetEnvironment()
	case *executionv1.TerminalRequest:
		return r.GetStart().GetEnvironment()
	}
	return nil
}

func size(m any) int64 {
	if p, ok := m.(proto.Message); ok {
		return int64(proto.Size(p))
	}
	return 0
}

// countingStream counts a data stream's messages: received ones count once the call
// succeeds or has answered (the grant was accepted then), sent ones always.
type countingStream struct {
	grpc.ServerStream
	env           *executionv1.EnvironmentRef
	in, out, sent int64
}

func (s *countingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.env == nil {
		s.env = envOf(m)
	}
	s.in += size(m)
	return nil
}

func (s *countingStream) SendMsg(m any) error {
	if err := s.ServerStream.SendMsg(m); err != nil {
		return err
	}
	s.sent++
	s.out += size(m)
	return nil
}

// done counts the stream's call.
func (s *countingStream) done(u *usageCounter, command bool, err error) {
	if err != nil && s.sent == 0 {
		return // refused, or failed before it served anything
	}
	var c int64
	if command {
		c = 1
	}
	u.count(s.env, c, s.in, s.out)
}

// maxReleased bounds the detached commands a gateway remembers having given back.
const maxReleased = 4096

// releasedSet remembers the last maxReleased keys added, so a command seen ended again
// costs no control call.
type releasedSet struct {
	mu   sync.Mutex
	keys map[string]bool
	ring []string
	next int
}

// add reports whether key is new (and remembers it).
func (r *releasedSet) add(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys, r.ring = map[string]bool{}, make([]string, maxReleased)
	}
	if r.keys[key] {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.keys, old)
	}
	r.ring[r.next], r.keys[key] = key, true
	r.next = (r.next + 1) % maxReleased
	return true
}

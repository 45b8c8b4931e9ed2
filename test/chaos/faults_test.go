package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execplane/execplane/internal/dev/devsystem"
)

// A fault is injected for a while and then healed; the scheduler runs one at a time, with
// a quiet gap between, every choice drawn from the run's seed.
type fault struct {
	name string
	// inject starts the fault and returns what heals it (nil: nothing to heal).
	inject func(ctx context.Context, s *system, rng *rand.Rand) (heal func(), err error)
	// lasts is how long the fault holds before it is healed.
	lasts time.Duration
}

// faults is every fault the scheduler draws from.
var faults = []fault{
	{name: "kill the leading controller", inject: killController(true)},
	{name: "kill the standby controller", inject: killController(false)},
	{name: "pause the leader past its lease", lasts: leaseDuration + 3*time.Second, inject: pauseLeader},
	{name: "kill a gateway", inject: killGateway},
	{name: "restart the API server", inject: restartAPIServer},
	{name: "pause etcd", lasts: 3 * time.Second, inject: pauseComponent("etcd")},
	{name: "delay a gateway's API-server path", lasts: 5 * time.Second, inject: onProxy(api, delay)},
	{name: "stall a gateway's API-server path", lasts: 4 * time.Second, inject: onProxy(api, stall)},
	{name: "reset a gateway's API-server connections", inject: onProxy(api, reset)},
	{name: "delay a gateway's controller path", lasts: 5 * time.Second, inject: onProxy(control, delay)},
	{name: "stall a gateway's controller path", lasts: 4 * time.Second, inject: onProxy(control, stall)},
	{name: "reset a gateway's controller connections", inject: onProxy(control, reset)},
	{name: "partition a gateway from the controller", lasts: 4 * time.Second, inject: onProxy(control, partition)},
}

// soakFaults are the faults that leave every controller and gateway process running: the
// soak compares each process's resources before and after, which a restart would void.
var soakFaults = slices.DeleteFunc(slices.Clone(faults), func(f fault) bool {
	return strings.HasPrefix(f.name, "kill") || strings.HasPrefix(f.name, "pause the leader") || f.name == "restart the API server"
})

// scheduler injects faults until ctx ends and records which, when: in rounds, each class
// once per round in an order drawn from the seed (a class that could not be injected is
// tried once more at the round's end), so that a run long enough for a round exercises
// every class.
type scheduler struct {
	s      *system
	rng    *rand.Rand
	faults []fault

	mu       sync.Mutex
	injected map[string]int
	rounds   int // completed
	log      []string
	errs     []string
}

func newScheduler(s *system, seed uint64, from []fault) *scheduler {
	return &scheduler{s: s, rng: rand.New(rand.NewPCG(seed, 0xfa17)), faults: from, injected: map[string]int{}}
}

// faultGap is the quiet between two faults: the system is under one most of the time, and
// a round of every class fits the short run of make test.
func (f *scheduler) faultGap() time.Duration {
	return time.Duration(1000+f.rng.IntN(2000)) * time.Millisecond
}

func (f *scheduler) run(ctx context.Context, began time.Time) {
	for {
		order := f.rng.Perm(len(f.faults))
		retried := map[int]bool{}
		for len(order) > 0 {
			sleep(ctx, f.faultGap())
			if ctx.Err() != nil {
				return
			}
			i := order[0]
			order = order[1:]
			ft := f.faults[i]
			heal, err := ft.inject(ctx, f.s, f.rng)
			f.mu.Lock()
			at := time.Since(began).Round(time.Millisecond)
			if err != nil {
				f.errs = append(f.errs, fmt.Sprintf("%s: %s: %v", at, ft.name, err))
				if !retried[i] {
					retried[i] = true
					order = append(order, i)
				}
			} else {
				f.injected[ft.name]++
				f.log = append(f.log, fmt.Sprintf("%s %s", at, ft.name))
			}
			f.mu.Unlock()
			if heal != nil {
				sleep(context.WithoutCancel(ctx), ft.lasts) // a fault always ends, even at the end of the run
				heal()
			}
		}
		f.mu.Lock()
		f.rounds++
		f.mu.Unlock()
	}
}

// completed is how many rounds ended.
func (f *scheduler) completed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rounds
}

// missing lists the classes not injected yet.
func (f *scheduler) missing() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ft := range f.faults {
		if f.injected[ft.name] == 0 {
			out = append(out, ft.name)
		}
	}
	return out
}

// leading returns the leading controller and the other, if any.
func leading(s *system) (lead, standby *devsystem.Process) {
	controllers, _ := s.Processes()
	for _, p := range controllers {
		if p.Exited() == nil && p.Listen == *s.leader.Load() {
			lead = p
		} else {
			standby = p
		}
	}
	return lead, standby
}

func killController(lead bool) func(context.Context, *system, *rand.Rand) (func(), error) {
	return func(_ context.Context, s *system, _ *rand.Rand) (func(), error) {
		l, o := leading(s)
		p := o
		if lead {
			p = l
		}
		if p == nil {
			return nil, fmt.Errorf("no such controller now")
		}
		return nil, syscall.Kill(p.PID(), syscall.SIGKILL) // the supervisor restarts it
	}
}

// pauseLeader stops the leader (SIGSTOP) until its lease has passed to the other replica,
// then resumes it: it must find itself deposed and exit without writing.
func pauseLeader(_ context.Context, s *system, _ *rand.Rand) (func(), error) {
	p, _ := leading(s)
	if p == nil {
		return nil, fmt.Errorf("no leader now")
	}
	s.hold(p.Name, true)
	if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
		s.hold(p.Name, false)
		return nil, err
	}
	return func() {
		_ = syscall.Kill(p.PID(), syscall.SIGCONT)
		s.hold(p.Name, false)
	}, nil
}

func killGateway(_ context.Context, s *system, rng *rand.Rand) (func(), error) {
	_, gateways := s.Processes()
	return nil, syscall.Kill(gateways[rng.IntN(len(gateways))].PID(), syscall.SIGKILL)
}

func restartAPIServer(ctx context.Context, s *system, _ *rand.Rand) (func(), error) {
	return nil, s.c.Restart(ctx, "kube-apiserver")
}

func pauseComponent(name string) func(context.Context, *system, *rand.Rand) (func(), error) {
	return func(_ context.Context, s *system, _ *rand.Rand) (func(), error) {
		if err := s.c.Pause(name); err != nil {
			return nil, err
		}
		return func() { _ = s.c.Continue(name) }, nil
	}
}

// The paths a proxy fault acts on, and what it does.
type (
	path   int
	action int
)

const (
	api path = iota
	control
)

const (
	delay action = iota
	stall
	reset
	partition
)

func onProxy(which path, what action) func(context.Context, *system, *rand.Rand) (func(), error) {
	return func(_ context.Context, s *system, rng *rand.Rand) (func(), error) {
		proxies := s.api
		if which == control {
			proxies = s.control
		}
		p := proxies[rng.IntN(len(proxies))]
		switch what {
		case delay:
			p.Delay(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		case stall:
			p.Stall()
		case reset:
			p.Reset()
			return nil, nil
		case partition:
			p.Refuse(true)
			p.Reset()
		}
		return p.Heal, nil
	}
}

// timeline is every fault injected, at its time since the run began.
func (f *scheduler) timeline() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.log, ", ")
}

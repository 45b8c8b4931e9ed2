package walkthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Timeout bounds the whole walkthrough (a warm environment is ready in about a second; a
// cold one on the real node in a few).
const Timeout = 3 * time.Minute

// Session is who walks through and where.
type Session struct {
	// Caller may attest owners; Admin administers every environment.
	Caller, Admin *client.Client
	// CallerIdentity and AdminIdentity name them in the header.
	CallerIdentity, AdminIdentity string
	// Gateway is the address the clients dial, Namespace the control plane's,
	// ExecutorNamespace the environments'; Where says where executors run. Only printed.
	Gateway, Namespace, ExecutorNamespace, Where string
	// Profile is the profile the environment is ensured with.
	Profile string
	// Owner is the environment's owner (attested by Caller).
	Owner client.Owner
}

// Run walks s through a session, printing each step to w: ensure → wait Ready → acquire →
// write → run → read → release → retire → delete-retired. A failed step ends it with an
// error naming the step.
func Run(ctx context.Context, s Session, w io.Writer) error {
	caller, admin := s.Caller, s.Admin
	var err error
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()

	st := &steps{w: w, total: 10}
	fmt.Fprintf(w, "execplane demo: gateway %s, namespace %s, executors in %s %s\n  caller %s\n  admin  %s\n\n",
		s.Gateway, s.Namespace, s.ExecutorNamespace, s.Where, s.CallerIdentity, s.AdminIdentity)

	var p client.Profile
	if err := st.do("validate the profile", func() (string, error) {
		if p, err = caller.ValidateProfile(ctx, s.Profile, ""); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s, files ≤ %d bytes, commands ≤ %s", p.Name, short(p.Digest), p.MaxFileBytes, p.MaxCommandDuration), nil
	}); err != nil {
		return err
	}
	owner := s.Owner
	binding := fmt.Sprintf("demo-%d", time.Now().Unix())
	var env *client.Environment
	if err := st.do("ensure the binding's environment", func() (string, error) {
		env, err = caller.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: binding, Profile: s.Profile, NoWait: true})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("binding %s → environment %s (created: %v)", binding, env.ID(), env.Created), nil
	}); err != nil {
		return err
	}
	if err := st.do("wait until it is Ready", func() (string, error) {
		if err := env.WaitReady(ctx); err != nil {
			return "", err
		}
		st := env.Status()
		return fmt.Sprintf("executor Pod %s on workspace PVC %s", short(st.GetPodUid()), short(st.GetPvcUid())), nil
	}); err != nil {
		return err
	}
	var run *client.Run
	if err := st.do("acquire a run (renewed in the background)", func() (string, error) {
		run, err = env.Acquire(ctx, client.AcquireOptions{RunID: "demo-run"})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("claim %s at epoch %d", short(run.Claim().GetClaimId()), run.Claim().GetEpoch()), nil
	}); err != nil {
		return err
	}
	defer run.Close(context.WithoutCancel(ctx))
	if err := st.do("write greeting.txt", func() (string, error) {
		fi, err := run.WriteFile(ctx, "greeting.txt", []byte("hello from an execplane workspace\n"))
		return fmt.Sprintf("%d bytes, version %s", fi.Size, short(fi.Version)), err
	}); err != nil {
		return err
	}
	if err := st.do("run a command that reads it", func() (string, error) {
		res, err := run.Run(ctx, client.Command{Shell: "wc -w < greeting.txt; tr a-z A-Z < greeting.txt > shout.txt", Timeout: 30 * time.Second})
		if err != nil {
			return "", err
		}
		if !res.Succeeded() {
			return "", fmt.Errorf("the command ended %s: %s", res.State, res.Stderr.String())
		}
		return fmt.Sprintf("exit 0 in %s, stdout %q", res.Duration.Round(time.Millisecond), res.Stdout.String()), nil
	}); err != nil {
		return err
	}
	if err := st.do("read its output file", func() (string, error) {
		data, err := run.ReadFile(ctx, "shout.txt")
		return fmt.Sprintf("shout.txt: %q", data), err
	}); err != nil {
		return err
	}
	if err := st.do("release the run", func() (string, error) {
		return "the run grant is dead from now on", run.Close(ctx)
	}); err != nil {
		return err
	}
	if err := st.do("retire the environment (administrator)", func() (string, error) {
		if err := env.Refresh(ctx); err != nil {
			return "", err
		}
		epoch := env.Status().GetEpoch()
		if _, err := admin.Retire(ctx, client.AdminRequest{ID: env.ID(), Revision: env.Revision(), Preconditions: client.Preconditions{Epoch: &epoch}, Reason: "demo"}); err != nil {
			return "", err
		}
		for env.Status().GetLifecycle() != executionv1.LifecycleState_LIFECYCLE_STATE_RETIRED {
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return "", err
			}
			if err := env.Refresh(ctx); err != nil {
				return "", err
			}
		}
		return "executor Pod stopped, workspace kept", nil
	}); err != nil {
		return err
	}
	if err := st.do("delete the retired environment (administrator)", func() (string, error) {
		pvc := env.Status().GetPvcUid()
		if err := admin.DeleteRetired(ctx, client.AdminRequest{ID: env.ID(), Revision: env.Revision(), Preconditions: client.Preconditions{PVCUID: &pvc}, Reason: "demo"}); err != nil {
			return "", err
		}
		for {
			err := env.Refresh(ctx)
			if errors.Is(err, client.ErrNotFound) {
				return "workspace and environment deleted", nil
			}
			if err != nil {
				return "", err
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return "", err
			}
		}
	}); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ndone in %s.\n", st.elapsed().Round(time.Millisecond))
	return nil
}

// steps prints a numbered walkthrough with each step's time.
type steps struct {
	w        io.Writer
	n, total int
	start    time.Time
}

func (s *steps) do(what string, f func() (string, error)) error {
	if s.start.IsZero() {
		s.start = time.Now()
	}
	s.n++
	fmt.Fprintf(s.w, "%2d/%d %s ... ", s.n, s.total, what)
	t := time.Now()
	detail, err := f()
	if err != nil {
		fmt.Fprintln(s.w, "failed")
		return fmt.Errorf("%s: %w", what, err)
	}
	fmt.Fprintf(s.w, "ok (%s)\n      %s\n", time.Since(t).Round(time.Millisecond), detail)
	return nil
}

func (s *steps) elapsed() time.Duration { return time.Since(s.start) }

func short(s string) string {
	if len(s) > 19 {
		return s[:19] + "…"
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

package devcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devstack"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// demoTimeout bounds the whole walkthrough (a warm environment is ready in about a second).
const demoTimeout = 3 * time.Minute

// runDemo walks a real client through a session against the stack of `execplane-dev up`:
// ensure → wait Ready → acquire → write → run → read → release → retire → delete-retired.
func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("execplane-dev demo", flag.ContinueOnError)
	fs.SetOutput(stdout)
	stateDir := fs.String("state-dir", ".state/dev", "the stack's state directory (execplane-dev up)")
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	info, err := devstack.LoadInfo(*stateDir)
	if err != nil {
		return err
	}
	if info.GatewayAddress == "" {
		return errors.New("the stack runs the cluster alone: stop it (make demo-down) and start it with --controller and --gateway (make demo does)")
	}
	dial := func(who devstack.Credentials) (*client.Client, error) {
		return client.Dial(client.Config{Address: info.GatewayAddress, ServerName: info.ServerName, CAFile: info.CAFile, CertFile: who.CertFile, KeyFile: who.KeyFile})
	}
	caller, err := dial(info.Caller)
	if err != nil {
		return err
	}
	defer caller.Close()
	admin, err := dial(info.Admin)
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()

	s := &steps{w: stdout, total: 10}
	where := "on the fake node (the helper a process of this machine)"
	if info.Node == devstack.NodeReal {
		where = "on the real node (containers of the example executor image)"
	}
	fmt.Fprintf(stdout, "execplane demo: gateway %s, namespace %s, executors in %s %s\n  caller %s\n  admin  %s\n\n",
		info.GatewayAddress, info.Namespace, info.ExecutorNamespace, where, info.Caller.Identity, info.Admin.Identity)

	var p client.Profile
	if err := s.do("validate the profile", func() (string, error) {
		if p, err = caller.ValidateProfile(ctx, info.Profile, ""); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s, files ≤ %d bytes, commands ≤ %s", p.Name, short(p.Digest), p.MaxFileBytes, p.MaxCommandDuration), nil
	}); err != nil {
		return err
	}
	owner := client.Owner{Issuer: devstack.DemoIssuer, Subject: devstack.DemoOwner}
	binding := fmt.Sprintf("demo-%d", time.Now().Unix())
	var env *client.Environment
	if err := s.do("ensure the binding's environment", func() (string, error) {
		env, err = caller.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: binding, Profile: info.Profile, NoWait: true})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("binding %s → environment %s (created: %v)", binding, env.ID(), env.Created), nil
	}); err != nil {
		return err
	}
	if err := s.do("wait until it is Ready", func() (string, error) {
		if err := env.WaitReady(ctx); err != nil {
			return "", err
		}
		st := env.Status()
		return fmt.Sprintf("executor Pod %s on workspace PVC %s", short(st.GetPodUid()), short(st.GetPvcUid())), nil
	}); err != nil {
		return err
	}
	var run *client.Run
	if err := s.do("acquire a run (renewed in the background)", func() (string, error) {
		run, err = env.Acquire(ctx, client.AcquireOptions{RunID: "demo-run"})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("claim %s at epoch %d", short(run.Claim().GetClaimId()), run.Claim().GetEpoch()), nil
	}); err != nil {
		return err
	}
	defer run.Close(context.WithoutCancel(ctx))
	if err := s.do("write greeting.txt", func() (string, error) {
		fi, err := run.WriteFile(ctx, "greeting.txt", []byte("hello from an execplane workspace\n"))
		return fmt.Sprintf("%d bytes, version %s", fi.Size, short(fi.Version)), err
	}); err != nil {
		return err
	}
	if err := s.do("run a command that reads it", func() (string, error) {
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
	if err := s.do("read its output file", func() (string, error) {
		data, err := run.ReadFile(ctx, "shout.txt")
		return fmt.Sprintf("shout.txt: %q", data), err
	}); err != nil {
		return err
	}
	if err := s.do("release the run", func() (string, error) {
		return "the run grant is dead from now on", run.Close(ctx)
	}); err != nil {
		return err
	}
	if err := s.do("retire the environment (administrator)", func() (string, error) {
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
	if err := s.do("delete the retired environment (administrator)", func() (string, error) {
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
	fmt.Fprintf(stdout, "\ndone in %s.\n", s.elapsed().Round(time.Millisecond))
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

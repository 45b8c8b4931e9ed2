package devcmd

import (
	"context"
	"errors"
	"flag"
	"io"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devstack"
	"github.com/execplane/execplane/internal/dev/walkthrough"
	"github.com/execplane/execplane/pkg/client"
)

// runDemo walks a real client through a session against the stack of `execplane-dev up`
// (internal/dev/walkthrough).
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
	where := "on the fake node (the helper a process of this machine)"
	if info.Node == devstack.NodeReal {
		where = "on the real node (containers of the Debian executor image: bash, python3, git)"
	}
	return walkthrough.Run(ctx, walkthrough.Session{
		Caller: caller, Admin: admin, CallerIdentity: info.Caller.Identity, AdminIdentity: info.Admin.Identity,
		Gateway: info.GatewayAddress, Namespace: info.Namespace, ExecutorNamespace: info.ExecutorNamespace, Where: where,
		Profile: info.Profile, Owner: client.Owner{Issuer: devstack.DemoIssuer, Subject: devstack.DemoOwner},
	}, stdout)
}

package devstack

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devsystem"
)

// The E2B front end of a stack (bin/e2b; docs/e2b.md): E2B SDK programs run against the
// stack with the variables of e2b.env. Its template "base" (the SDK's default) is the demo
// profile, whose executor image on the real node links /home/user, where E2B programs keep
// their files, to the workspace.
const (
	e2bEnvFile = "e2b.env"
	e2bDir     = "e2b"
	// e2bReady bounds the front end's start.
	e2bReady = 30 * time.Second
)

// frontEnd is a running E2B front end.
type frontEnd struct {
	cmd  *exec.Cmd
	done chan error
	url  string
	key  string
}

// startE2B runs the front end against the system's gateway as the caller (a client that may
// attest owners), with one API key for the demo owner, written to e2b.env with the URL.
func startE2B(ctx context.Context, o Options, sys *devsystem.System, logf func(string, ...any)) (*frontEnd, error) {
	dir := filepath.Join(o.StateDir, e2bDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var raw [20]byte
	_, _ = rand.Read(raw[:])
	key := "e2b_" + hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	var token [32]byte
	_, _ = rand.Read(token[:])
	if err := os.WriteFile(filepath.Join(dir, "token.key"), []byte(base64.StdEncoding.EncodeToString(token[:])+"\n"), 0o600); err != nil {
		return nil, err
	}
	keys := fmt.Sprintf("version: 1\ntokenKeyFile: token.key\nkeys:\n  - id: demo\n    sha256: %s\n    owner: {issuer: %q, subject: %q}\n",
		hex.EncodeToString(sum[:]), DemoIssuer, DemoOwner)
	if err := os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte(keys), 0o600); err != nil {
		return nil, err
	}
	files, err := sys.ClientFiles(devsystem.Caller)
	if err != nil {
		return nil, err
	}
	addrs, err := devcluster.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "e2b.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.E2B, "--listen-address", addrs[0], "--diagnostics-address", addrs[1], "--gateway", sys.Gateways[0].Listen,
		"--gateway-server-name", files.ServerName, "--gateway-ca", files.CAFile, "--client-cert", files.CertFile, "--client-key", files.KeyFile,
		"--keys", filepath.Join(dir, "keys.yaml"), "--template", "base="+DemoProfile, "--log-format", "text", "--spool-dir", dir)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	fe := &frontEnd{cmd: cmd, done: make(chan error, 1), url: "http://" + addrs[0], key: key}
	go func() { fe.done <- cmd.Wait(); log.Close() }()
	deadline := time.Now().Add(e2bReady)
	for {
		if resp, err := http.Get(fe.url + "/sandboxes"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				logf("E2B front end ready at %s (template base: profile %s)", fe.url, DemoProfile)
				return fe, nil
			}
		}
		select {
		case err := <-fe.done:
			return nil, fmt.Errorf("the E2B front end exited: %v (log: %s)", err, log.Name())
		case <-ctx.Done():
			fe.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fe.stop()
			return nil, fmt.Errorf("the E2B front end did not answer within %s (log: %s)", e2bReady, log.Name())
		}
	}
}

// exited reports the front end's end, or nil while it runs.
func (fe *frontEnd) exited() error {
	select {
	case err := <-fe.done:
		fe.done <- err
		return fmt.Errorf("the E2B front end exited: %v", err)
	default:
		return nil
	}
}

func (fe *frontEnd) stop() {
	if fe.exited() != nil {
		return
	}
	_ = fe.cmd.Process.Signal(os.Interrupt)
	select {
	case <-fe.done:
	case <-time.After(15 * time.Second):
		_ = fe.cmd.Process.Kill()
		<-fe.done
	}
}

// writeE2BEnv writes the shell file that points E2B SDK programs at the stack.
func writeE2BEnv(dir, url, key string) error {
	if url == "" {
		return nil
	}
	env := fmt.Sprintf("export E2B_API_URL=%s\nexport E2B_SANDBOX_URL=%s\nexport E2B_API_KEY=%s\n", shq(url), shq(url), shq(key))
	return os.WriteFile(filepath.Join(dir, e2bEnvFile), []byte(env), 0o600)
}

package execctl

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/mcpserver"
	"github.com/execplane/execplane/internal/version"
)

// mcpShutdown bounds the release of the run claim and the HTTP server's drain when the
// server is told to stop.
const mcpShutdown = 10 * time.Second

// mcpReadHeaderTimeout bounds a request's headers on the HTTP transport (slowloris).
const mcpReadHeaderTimeout = 10 * time.Second

var mcpGroup = &group{name: "mcp", summary: "serve a binding's workspace to an agent as Model Context Protocol tools (stdio or streamable HTTP)", leaves: []*leaf{{
	nargs: 0,
	summary: "an MCP server over stdio (or --http on a loopback address) whose tools ensure the binding's environment, read, write, list, search, remove and rename files, " +
		"and run commands (streamed, or detached); the run claim is held while it serves and released when it ends",
	example: "execctl mcp --binding conv-1 --profile sandbox --owner alice --issuer https://idp.example\n" +
		"execctl mcp --binding conv-1 --profile sandbox --http 127.0.0.1:8931 --token-file ~/.mcp-token   # streamable HTTP at http://127.0.0.1:8931/mcp, Authorization: Bearer <the file's token>",
	setup: func(fs *flag.FlagSet, in *invocation) func() error {
		owner := ownerFlags(fs, in)
		binding := fs.String("binding", in.getenv("EXECPLANE_BINDING"), "the binding whose environment the tools act on ($EXECPLANE_BINDING) (required)")
		profile := fs.String("profile", in.getenv("EXECPLANE_PROFILE"), "the profile an environment is created with ($EXECPLANE_PROFILE)")
		envID := fs.String("environment", "", "attach to this environment of the binding instead of ensuring one (with --revision)")
		revision := fs.String("revision", "", "the attached environment's revision")
		runID := fs.String("run-id", "", "the run claim's id (default: mcp- and a random suffix)")
		ttl := fs.Duration("run-ttl", 0, "the run claim's TTL, renewed in the background (the SDK's default when 0)")
		listen := fs.String("http", "", "serve streamable HTTP on this loopback host:port at /mcp instead of stdio; every request must carry Authorization: Bearer and the token ($EXECPLANE_MCP_TOKEN, or a fresh one written to --token-file)")
		tokenFile := fs.String("token-file", "", "with --http: write a fresh bearer token to this file (mode 0600), unless $EXECPLANE_MCP_TOKEN gives one")
		return func() error {
			o, err := owner()
			if err != nil {
				return err
			}
			var token string
			if *listen != "" {
				if err := loopback(*listen); err != nil {
					return err
				}
				if token, err = httpToken(in.getenv("EXECPLANE_MCP_TOKEN"), *tokenFile); err != nil {
					return err
				}
			}
			c, err := in.dial()
			if err != nil {
				return err
			}
			srv, err := mcpserver.New(mcpserver.Config{Client: c, Owner: o, BindingID: *binding, Profile: *profile,
				EnvironmentID: *envID, Revision: *revision, RunID: *runID, RunTTL: *ttl, CallTimeout: in.cfg.Timeout, Version: version.Version})
			if err != nil {
				return cli.Usagef("%v", err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(in.ctx), mcpShutdown)
				defer cancel()
				if err := srv.Close(ctx); err != nil {
					fmt.Fprintf(in.stderr, "execctl mcp: releasing the run claim: %v\n", err)
				}
			}()
			if *listen == "" {
				err := srv.MCP().Run(in.ctx, &mcp.StdioTransport{})
				if errors.Is(err, context.Canceled) || in.ctx.Err() != nil {
					return nil
				}
				return err
			}
			return serveHTTP(in, srv, *listen, token)
		}
	},
}}}

// loopback refuses a listen address that is not a loopback one: the tools act with this
// process's client certificate. Binding to loopback (and the MCP SDK's checks of Host and
// Origin against DNS rebinding) keeps the endpoint to this machine; the bearer token keeps it
// to whoever was given the token there (another user's process on the machine is not).
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return cli.Usagef("--http %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return cli.Usagef("--http %q: only a loopback address (127.0.0.1, [::1], localhost): the MCP endpoint acts with this process's certificate", addr)
	}
	return nil
}

// minTokenBytes is the least a bearer token given in $EXECPLANE_MCP_TOKEN may be: 128 bits
// written as hex.
const minTokenBytes = 32

// httpToken is the bearer token the HTTP endpoint requires: the environment's, or a fresh
// random one written to file (created with mode 0600; an existing file is replaced, never
// followed if it is a symbolic link).
func httpToken(fromEnv, file string) (string, error) {
	switch {
	case fromEnv != "":
		if len(fromEnv) < minTokenBytes {
			return "", cli.Usagef("$EXECPLANE_MCP_TOKEN: at least %d characters", minTokenBytes)
		}
		return fromEnv, nil
	case file == "":
		return "", cli.Usagef("--http needs a bearer token: set $EXECPLANE_MCP_TOKEN, or --token-file to have one written there")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b[:])
	_ = os.Remove(file) // a fresh file: never one another process holds open, nor a link's target
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	_, err = f.WriteString(token + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return token, nil
}

// bearer admits a request only with the token: "Authorization: Bearer <token>", compared in
// constant time; anything else is 401 before the MCP handler sees it.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="execctl mcp"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func serveHTTP(in *invocation, srv *mcpserver.Server, addr, token string) error {
	shared := srv.MCP()
	mux := http.NewServeMux()
	mux.Handle("/mcp", bearer(token, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return shared }, nil)))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: mcpReadHeaderTimeout}
	fmt.Fprintf(in.stderr, "execctl mcp: serving http://%s/mcp\n", lis.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(lis) }()
	select {
	case err := <-done:
		return err
	case <-in.ctx.Done():
		ctx, cancel := context.WithTimeout(context.WithoutCancel(in.ctx), mcpShutdown)
		defer cancel()
		return hs.Shutdown(ctx)
	}
}

package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The local registry: go-containerregistry's registry, in this process, on loopback, its
// blobs in memory. The real node's containerd pulls from it under a fixed name,
// RegistryName, which a hosts.toml maps to the registry's port (plain HTTP): the pull path
// operators use — a reference resolved and pulled by the runtime, not an import — with
// references that stay the same from one start to the next.
const (
	// RegistryName is the local registry's name in image references.
	RegistryName = "registry.execplane.test"
	// registryShutdown bounds the registry's graceful stop.
	registryShutdown = 5 * time.Second
)

type localRegistry struct {
	srv  *http.Server
	addr string // 127.0.0.1:port
	done chan struct{}
}

func startRegistry() (*localRegistry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devcluster: registry: %w", err)
	}
	r := &localRegistry{
		srv: &http.Server{
			Handler:           gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 10 * time.Second,
		},
		addr: l.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(l)
	}()
	return r, nil
}

func (r *localRegistry) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), registryShutdown)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
}

// writeHosts maps RegistryName to the registry for containerd (config_path layout:
// <dir>/<name>/hosts.toml).
func (r *localRegistry) writeHosts(dir string) error {
	d := filepath.Join(dir, RegistryName)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", r.addr, r.addr)
	return os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(hosts), 0o600)
}

// RegistryAddress is the local registry's address (host:port, plain HTTP) to push to; empty
// without a real node.
func (c *Cluster) RegistryAddress() string {
	if c.registry == nil {
		return ""
	}
	return c.registry.addr
}

// PushImage pushes img to the local registry as repository repo (tagged tag) and returns
// the reference the real node pulls it by: RegistryName/repo@digest.
func (c *Cluster) PushImage(ctx context.Context, repo, tag string, img v1.Image) (string, error) {
	if c.registry == nil {
		return "", errors.New("devcluster: no registry (it runs with the real node)")
	}
	ref, err := name.NewTag(c.registry.addr+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("devcluster: %w", err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("devcluster: pushing %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return RegistryName + "/" + repo + "@" + digest.String(), nil
}

package csidriver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DefaultName is the driver's name in the local cluster.
const DefaultName = "hostpath.csi.execplane.dev"

// Options configure a driver.
type Options struct {
	// Name and Version are what GetPluginInfo answers; Name defaults to DefaultName.
	Name, Version string
	// NodeID is the node's ID (NodeGetInfo): the Kubernetes node's name.
	NodeID string
	// StateDir holds the volumes, the snapshots and state.json.
	StateDir string
	// MaxVolumeBytes bounds a volume's requested size (CreateVolume answers OUT_OF_RANGE
	// beyond it); 0 is 1 TiB.
	MaxVolumeBytes int64
	// Logf, when set, receives one line per failed call.
	Logf func(format string, args ...any)
}

// Driver is the host-path CSI driver.
type Driver struct {
	opts Options
	// mu serialises every change of the state and of the directories (copies included: a
	// fixture's volumes are small).
	mu sync.Mutex
	st *state
}

// New loads the driver's state from opts.StateDir.
func New(opts Options) (*Driver, error) {
	if opts.NodeID == "" || opts.StateDir == "" {
		return nil, errors.New("csidriver: NodeID and StateDir are required")
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.MaxVolumeBytes == 0 {
		opts.MaxVolumeBytes = 1 << 40
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	st, err := load(opts.StateDir)
	if err != nil {
		return nil, err
	}
	return &Driver{opts: opts, st: st}, nil
}

// Serve serves the CSI services on the Unix socket path (a stale socket there is
// replaced) until ctx ends; the socket is removed then.
func (d *Driver) Serve(ctx context.Context, path string) error {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(d.logFailures))
	csi.RegisterIdentityServer(srv, identity{d: d})
	csi.RegisterControllerServer(srv, controller{d: d})
	csi.RegisterNodeServer(srv, node{d: d})
	return serveUnix(ctx, srv, path)
}

// ServeRegistration serves the kubelet's plugin registration on dir/<name>-reg.sock (dir is
// the kubelet's plugins_registry) until ctx ends, naming endpoint (the CSI socket, as the
// kubelet sees it) as the driver's. registered receives each status the kubelet reports.
func (d *Driver) ServeRegistration(ctx context.Context, dir, endpoint string, registered func(ok bool, reason string)) error {
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, &registration{name: d.opts.Name, endpoint: endpoint, notify: registered})
	return serveUnix(ctx, srv, filepath.Join(dir, d.opts.Name+"-reg.sock"))
}

func serveUnix(ctx context.Context, srv *grpc.Server, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, srv.Stop)
	defer stop()
	defer os.Remove(path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

func (d *Driver) logFailures(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		d.opts.Logf("csidriver: %s: %v", info.FullMethod, err)
	}
	return resp, err
}

// identity is the CSI identity service.
type identity struct {
	csi.UnimplementedIdentityServer
	d *Driver
}

func (i identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.d.opts.Name, VendorVersion: i.d.opts.Version}, nil
}

func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// registration is the kubelet's plugin registration service.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
	notify         func(bool, string)
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if r.notify != nil {
		r.notify(s.PluginRegistered, s.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// invalid is an INVALID_ARGUMENT error.
func invalid(msg string) error { return status.Error(codes.InvalidArgument, msg) }

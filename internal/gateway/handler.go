package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// DefaultObserveWait is how long a call waits for this gateway's view of an environment to
// catch up with an authentic grant newer than it (issued by another gateway a moment ago).
// The view normally lags by milliseconds; past this bound the call answers UNAVAILABLE,
// retryable, rather than holding a slot.
const DefaultObserveWait = 3 * time.Second

// EnvironmentSource is the gateway's view of environments (Environments in production).
type EnvironmentSource interface {
	// Await runs check on the named environment (nil when absent) until it returns anything
	// but grant.ErrNotObserved, for at most wait.
	Await(ctx context.Context, name string, wait time.Duration, check func(*executionv1alpha1.ExecutionEnvironment) error) error
	// Fresh returns nil while the view is proven current within its freshness bound, else
	// why not (retryable UNAVAILABLE): no grant is honoured on a view that may be stale.
	Fresh() error
}

// Executor runs one helper request at its target's executor Pod (podexec.Pool in production).
type Executor interface {
	Execute(ctx context.Context, t podexec.Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error)
}

// Backend is what the Handler serves from.
type Backend struct {
	// Control is the controller leader's control API (retrying; DialControl).
	Control controlv1.ControlServiceClient
	// Environments is the cached view used to verify grants and admit data operations.
	Environments EnvironmentSource
	// Executor runs the helper in executor Pods.
	Executor Executor
	// Profiles are the operator's profiles (limits for the helper, ValidateProfile).
	Profiles *profile.Registry
	// Material returns the current security material (grant keys), false when there is none.
	Material func() (*security.Bundle, bool)
}

// HandlerConfig tunes a Handler.
type HandlerConfig struct {
	// ObserveWait bounds the wait for the cache to catch up with a grant (DefaultObserveWait).
	ObserveWait time.Duration
	// MaxEnvironmentCalls bounds concurrent data calls into one environment
	// (DefaultMaxEnvironmentCalls when 0); the next is refused RESOURCE_EXHAUSTED at once.
	MaxEnvironmentCalls int
	// Now is the clock (time.Now).
	Now    func() time.Time
	Logger hclog.Logger
	// Metrics, if not nil, count executor outcomes.
	Metrics *Metrics
}

// Handler implements execution.v1 ExecutionProviderService. It expects every call to have
// passed the server's interceptors: the context carries the authenticated client
// (security.ClientFromContext) and a request id. It returns plain errors; the server's
// interceptor translates them once (pkg/apierror).
type Handler struct {
	executionv1grpc.UnimplementedExecutionProviderServiceServer
	cfg HandlerConfig
	b   Backend
	log hclog.Logger
	// calls counts data calls in flight per environment.
	calls *callSlots
	// warnedUnsealed is the material generation last warned of having no record keys.
	warnedUnsealed atomic.Uint64
	// released are the detached commands whose quota slot this gateway gave back.
	released releasedSet
}

var _ executionv1grpc.ExecutionProviderServiceServer = (*Handler)(nil)

// NewHandler returns a Handler; it refuses an incomplete backend.
func NewHandler(cfg HandlerConfig, b Backend) (*Handler, error) {
	if b.Control == nil || b.Environments == nil || b.Executor == nil || b.Profiles == nil || b.Material == nil {
		return nil, errors.New("gateway: the backend needs Control, Environments, Executor, Profiles and Material")
	}
	if cfg.ObserveWait <= 0 {
		cfg.ObserveWait = DefaultObserveWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxEnvironmentCalls <= 0 {
		cfg.MaxEnvironmentCalls = DefaultMaxEnvironmentCalls
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Handler{cfg: cfg, b: b, log: cfg.Logger.Named("handler"), calls: newCallSlots(cfg.MaxEnvironmentCalls)}, nil
}

// errNoClient: a call reached the handler without the authentication interceptor. It never
// happens through NewServer; refusing keeps the handler fail-closed if it is ever wired
// differently.
var errNoClient = fmt.Errorf("%w: no authenticated client", security.ErrUnauthenticated)

// client returns the authenticated caller.
func client(ctx context.Context) (security.Client, error) {
	c, ok := security.ClientFromContext(ctx)
	if !ok {
		return security.Client{}, errNoClient
	}
	return c, nil
}

// ValidateProfile implements ExecutionProviderService from the loaded profiles; any
// authenticated client may call it.
func (h *Handler) ValidateProfile(ctx context.Context, in *executionv1.ValidateProfileRequest) (*executionv1.ValidateProfileResponse, error) {
	if _, err := client(ctx); err != nil {
		return nil, err
	}
	name := in.GetProfile()
	if !ident.IsDNSLabel(name) {
		return nil, fmt.Errorf("%w: profile: must be a DNS-1123 label", apierror.ErrInvalidArgument)
	}
	if d := in.GetExpectedDigest(); d != "" && !ident.IsDigest(d) {
		return nil, fmt.Errorf("%w: expected_digest: must be sha256: and 64 lowercase hex digits", apierror.ErrInvalidArgument)
	}
	p, ok := h.b.Profiles.Profile(name)
	if !ok {
		return nil, fmt.Errorf("%w: no such profile", apierror.ErrNotFound)
	}
	if d := in.GetExpectedDigest(); d != "" && d != p.Digest {
		return nil, fmt.Errorf("%w: the profile's digest differs from expected_digest", apierror.ErrProfileMismatch)
	}
	return &executionv1.ValidateProfileResponse{Profile: profileView(p)}, nil
}

func profileView(p profile.Profile) *executionv1.Profile {
	return &executionv1.Profile{
		Name: p.Name, Digest: p.Digest, MaxFileBytes: uint64(p.MaxFileBytes), MaxCommandBytes: uint64(p.MaxCommandBytes),
		MaxCommandDuration: durationpb.New(p.MaxCommandDuration), Capabilities: p.Capabilities,
	}
}

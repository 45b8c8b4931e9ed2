package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// callTimeout bounds one file tool's call when the Config gives none: a file operation is a
// bounded piece of work on the server (the profile's limits), so a call that takes longer is
// stuck, not slow.
const callTimeout = 30 * time.Second

// readyTimeout bounds the wait for the environment to be Ready (a cold start on a real
// cluster: volume provisioning, an image pull).
const readyTimeout = 5 * time.Minute

// Config is what the server acts as and on.
type Config struct {
	// Client is a dialed Go SDK client; the server does not close it.
	Client *client.Client
	// Owner is the end user the client acts for; BindingID the binding whose environment
	// the tools act on.
	Owner     client.Owner
	BindingID string
	// Profile names the executor profile an environment is created with (Ensure).
	Profile string
	// EnvironmentID and Revision, when set, attach to that environment of the binding
	// instead of ensuring one.
	EnvironmentID, Revision string
	// RunID names the run claim the tools act under; empty means "mcp-" and a random suffix.
	RunID string
	// RunTTL is the claim's TTL (renewed in the background); 0 means the SDK's default.
	RunTTL time.Duration
	// CallTimeout bounds each file tool's call; 0 means callTimeout.
	CallTimeout time.Duration
	// Version is reported to the MCP client.
	Version string
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var problems []string
	if c.Client == nil {
		problems = append(problems, "no client")
	}
	if c.Owner.Issuer == "" || c.Owner.Subject == "" {
		problems = append(problems, "the owner (issuer and subject) is required")
	}
	if c.BindingID == "" {
		problems = append(problems, "the binding is required")
	}
	if (c.EnvironmentID == "") != (c.Revision == "") {
		problems = append(problems, "attaching needs both the environment id and its revision")
	}
	if c.EnvironmentID == "" && c.Profile == "" {
		problems = append(problems, "a profile is required to ensure the binding's environment (or attach with an environment id and revision)")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Server is the tools' state: the environment and the run claim they act under.
type Server struct {
	cfg Config

	mu  sync.Mutex
	env *client.Environment
	run *client.Run
	// deleted is the environment delete_environment last deleted, answered again by a
	// repeated delete.
	deleted *client.Environment
}

// New returns a server for cfg; nothing is called until a tool is.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RunID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.RunID = "mcp-" + hex.EncodeToString(b[:])
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = callTimeout
	}
	return &Server{cfg: cfg}, nil
}

// MCP returns an MCP server offering the tools (one per session or shared: the state is
// the Server's).
func (s *Server) MCP() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: "execplane", Title: "execplane workspace", Version: s.cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
	})
	s.addEnvironmentTools(m)
	s.addFileTools(m)
	s.addCommandTools(m)
	s.addDeleteTool(m)
	s.addSnapshotTool(m)
	return m
}

// instructions tell the agent how the tools fit together.
const instructions = `These tools act on one durable workspace (an execplane environment): files persist across commands and sessions.
Paths are relative to the workspace root. Call ensure_environment first to see the environment; every other tool ensures it too, except delete_environment, which ends it for good (only when the task says the workspace is no longer needed).
write_file with if_version (the version read_file or stat returned) writes only if the file is unchanged: on VERSION_MISMATCH read it again.
run_command runs a command to its end (its output streamed as progress when the client asks for progress); with detach it returns a command id to poll with command_status.
snapshot_workspace saves the files under a name before a risky step, a point to come back to or branch from.
A tool error starts with the API's reason (NOT_FOUND, VERSION_MISMATCH, STALE_EPOCH, ...). RUN_CLAIM_LOST means another client took the workspace: ensure_environment takes it back.`

// Close releases the run claim, if one is held.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	err := s.run.Close(ctx)
	s.run = nil
	return err
}

// errRunLost answers a tool while the claim is lost, until ensure_environment.
var errRunLost = errors.New("RUN_CLAIM_LOST")

// held returns the run the tools act under: the environment ensured (or attached) and
// Ready, the claim taken on first use. A lost claim is answered, not taken back.
func (s *Server) held(ctx context.Context) (*client.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil {
		if err := s.run.Err(); err != nil {
			return nil, fmt.Errorf("%w: the run claim is gone (%v); call ensure_environment to take it again", errRunLost, err)
		}
		return s.run, nil
	}
	return s.acquire(ctx)
}

// retake is ensure_environment's: the environment ensured and Ready, and a claim held — a
// lost one replaced by a new one, on purpose.
func (s *Server) retake(ctx context.Context) (*client.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil && s.run.Err() == nil {
		return s.run, nil
	}
	if s.run != nil {
		_ = s.run.Close(ctx) // gone already: Close only stops its renewal
		s.run = nil
	}
	s.env = nil // ensure or attach again: the environment may have moved on
	return s.acquire(ctx)
}

// acquire ensures (or attaches) the environment, waits until it is Ready and takes the run
// claim. s.mu is held.
func (s *Server) acquire(ctx context.Context) (*client.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if s.env == nil {
		env, err := s.environment(ctx)
		if err != nil {
			return nil, err
		}
		s.env = env
	}
	run, err := s.env.Acquire(ctx, client.AcquireOptions{RunID: s.cfg.RunID, TTL: s.cfg.RunTTL})
	if err != nil {
		return nil, err
	}
	s.run = run
	return run, nil
}

func (s *Server) environment(ctx context.Context) (*client.Environment, error) {
	if s.cfg.EnvironmentID != "" {
		env, err := s.cfg.Client.Attach(ctx, client.AttachRequest{Owner: s.cfg.Owner, BindingID: s.cfg.BindingID, ID: s.cfg.EnvironmentID, Revision: s.cfg.Revision})
		if err != nil {
			return nil, err
		}
		return env, env.WaitReady(ctx)
	}
	return s.cfg.Client.Ensure(ctx, client.EnsureRequest{Owner: s.cfg.Owner, BindingID: s.cfg.BindingID, Profile: s.cfg.Profile})
}

// callContext bounds one file tool's call.
func (s *Server) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// toolError is what an agent reads of a failed call: the API's reason first, then the
// server's message, and whether the same call may succeed later.
func toolError(err error) error {
	var e *client.Error
	switch {
	case errors.Is(err, errRunLost), errors.Is(err, errInvalidArgument):
		return err
	case errors.As(err, &e):
		reason := e.Reason
		if reason == "" { // no answer from execplane: the gRPC code, in the reasons' spelling
			reason = codeName(e.Code)
		}
		msg := fmt.Sprintf("%s: %s", reason, e.Message)
		if e.Retryable {
			msg += " (retryable: nothing was done; the same call may succeed later)"
		}
		return errors.New(msg)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("DEADLINE_EXCEEDED: %v", err)
	}
	return fmt.Errorf("ERROR: %v", err)
}

// codeName spells a gRPC code as the API spells its reasons: DeadlineExceeded is
// DEADLINE_EXCEEDED.
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// EnvironmentView is what ensure_environment answers.
type EnvironmentView struct {
	ID        string `json:"id" jsonschema:"the environment's id"`
	Revision  string `json:"revision" jsonschema:"the environment's revision (its UID)"`
	BindingID string `json:"binding_id"`
	Profile   string `json:"profile"`
	State     string `json:"state" jsonschema:"the lifecycle state (READY, SUSPENDED, ...)"`
	Ready     bool   `json:"ready"`
	Epoch     uint64 `json:"epoch" jsonschema:"the fencing epoch of the run claim held"`
	RunID     string `json:"run_id"`
	Message   string `json:"message,omitempty"`
}

// EnsureInput is ensure_environment's input (none).
type EnsureInput struct{}

func (s *Server) addEnvironmentTools(m *mcp.Server) {
	mcp.AddTool(m, &mcp.Tool{Name: "ensure_environment",
		Description: "Ensure the workspace's environment exists and is Ready (created on first use, resumed if suspended) and hold its run claim; answers its id, state and epoch. Takes the claim back after RUN_CLAIM_LOST.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, _ EnsureInput) (*mcp.CallToolResult, EnvironmentView, error) {
		run, err := s.retake(ctx)
		if err != nil {
			return nil, EnvironmentView{}, toolError(err)
		}
		st := run.Environment().Status()
		lifecycle := strings.TrimPrefix(st.GetLifecycle().String(), "LIFECYCLE_STATE_")
		if st.GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED {
			lifecycle = "UNKNOWN"
		}
		return nil, EnvironmentView{ID: run.Environment().ID(), Revision: run.Environment().Revision(), BindingID: s.cfg.BindingID,
			Profile: st.GetProfile(), State: lifecycle, Ready: st.GetReady(), Epoch: run.Claim().GetEpoch(), RunID: run.ID(), Message: st.GetMessage()}, nil
	})
}

// DeleteEnvironmentInput is delete_environment's input.
type DeleteEnvironmentInput struct {
	Confirm bool `json:"confirm" jsonschema:"must be true: the workspace and every file in it are deleted for good, and every command in it ends"`
}

// DeleteEnvironmentView is what delete_environment answers.
type DeleteEnvironmentView struct {
	ID    string `json:"id"`
	State string `json:"state" jsonschema:"DELETED once the executor and the workspace are gone, DELETING while they go"`
}

func (s *Server) addDeleteTool(m *mcp.Server) {
	mcp.AddTool(m, &mcp.Tool{Name: "delete_environment",
		Description: "Delete the workspace's environment for good: every command in it ends, every file in it is deleted. The next tool call starts a new, empty environment. Only when the task says the workspace is no longer needed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in DeleteEnvironmentInput) (*mcp.CallToolResult, DeleteEnvironmentView, error) {
		if !in.Confirm {
			return nil, DeleteEnvironmentView{}, toolError(errorf(errInvalidArgument, "confirm must be true"))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		env := s.env
		switch {
		case env == nil && s.deleted != nil:
			env = s.deleted // a repeated delete: answered DELETED, nothing created for it
		case env == nil && s.cfg.EnvironmentID != "":
			e, err := s.environment(ctx) // attaches: never creates
			if err != nil {
				return nil, DeleteEnvironmentView{}, toolError(err)
			}
			env = e
		case env == nil:
			// Ensuring here would create an environment only to delete it.
			return nil, DeleteEnvironmentView{}, toolError(errorf(errInvalidArgument, "no environment was used in this session: nothing to delete"))
		}
		if s.run != nil {
			_ = s.run.Close(ctx) // the claim dies with the environment; stop renewing it
			s.run = nil
		}
		s.env = nil // the next tool ensures the binding's next environment
		if err := env.Delete(ctx, maxDeleteWait); err != nil {
			return nil, DeleteEnvironmentView{}, toolError(err)
		}
		s.deleted = env
		return nil, DeleteEnvironmentView{ID: env.ID(), State: strings.TrimPrefix(env.Status().GetLifecycle().String(), "LIFECYCLE_STATE_")}, nil
	})
}

// SnapshotInput is snapshot_workspace's input.
type SnapshotInput struct {
	Name string `json:"name" jsonschema:"the snapshot's name: lowercase letters, digits and '-', at most 63, unique for the owner"`
}

// SnapshotView is what snapshot_workspace answers.
type SnapshotView struct {
	Name      string `json:"name"`
	State     string `json:"state" jsonschema:"READY once restorable; FAILED with failure when it holds nothing"`
	SizeBytes int64  `json:"size_bytes"`
	CutAt     string `json:"cut_at,omitempty" jsonschema:"when its state was fixed (RFC 3339)"`
	Failure   string `json:"failure,omitempty"`
}

// snapshotTimeout bounds snapshot_workspace: the cut of a copy lasts as long as the copy
// (the profile's snapshots.maxQuiesce, 2 minutes by default).
const snapshotTimeout = 3 * time.Minute

func (s *Server) addSnapshotTool(m *mcp.Server) {
	mcp.AddTool(m, &mcp.Tool{Name: "snapshot_workspace",
		Description: "Save the workspace's files as a named snapshot (its running processes are paused while it is taken, then go on): a point to come back to or to branch from (a new binding's environment started from the snapshot, e.g. execctl env ensure --from-snapshot NAME). Durable commands are not kept.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in SnapshotInput) (*mcp.CallToolResult, SnapshotView, error) {
		run, err := s.held(ctx)
		if err != nil {
			return nil, SnapshotView{}, toolError(err)
		}
		ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		defer cancel()
		snap, err := run.Environment().Snapshot(ctx, in.Name)
		if err != nil {
			return nil, SnapshotView{}, toolError(err)
		}
		out := SnapshotView{Name: snap.GetName(), State: strings.TrimPrefix(snap.GetState().String(), "SNAPSHOT_STATE_"), SizeBytes: snap.GetSizeBytes()}
		if snap.GetCutAt() != nil {
			out.CutAt = snap.GetCutAt().AsTime().UTC().Format(time.RFC3339)
		}
		if snap.GetFailureReason() != "" {
			out.Failure = snap.GetFailureReason() + ": " + snap.GetFailureMessage()
		}
		return nil, out, nil
	})
}

// maxDeleteWait is the API's bound on a delete's wait: a tool answers DELETED in most cases.
const maxDeleteWait = 30 * time.Second

func ptr[T any](v T) *T { return &v }

// errorf is an error of kind (a reason) with a message.
func errorf(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}

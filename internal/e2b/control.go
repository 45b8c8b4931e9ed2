package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/ident"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// E2B's control API (docs/e2b.md "Control API"): the REST calls of the SDK's Sandbox class,
// each an execplane call for the API key's owner.
const (
	// envdVersion is the envd protocol version served: it selects the SDK's code paths
	// (no default user, stdin flag, closeStdin, octet-stream uploads; no file metadata).
	envdVersion = "0.5.7"
	// defaultTemplate is what Sandbox.create() asks for.
	defaultTemplate = "base"
	// defaultTimeout is E2B's sandbox timeout when create or connect names none.
	defaultTimeout = 300 * time.Second
	// maxRequestBody bounds a control request's JSON (metadata and envVars included).
	maxRequestBody = 64 << 10
	// maxListLimit is E2B's page bound (and default) of a listing.
	maxListLimit = 100
)

// Reserved metadata keys: what the front end keeps on the environment beside the caller's
// metadata, so that every replica knows it (the template, the timeout's action, create's
// environment variables). A caller's key may not start with the prefix.
const (
	metaPrefix    = "e2b."
	metaTemplate  = metaPrefix + "template"
	metaOnTimeout = metaPrefix + "onTimeout"
	metaEnv       = metaPrefix + "env."
)

// The timeout actions as E2B's lifecycle names them.
const (
	onTimeoutKill  = "kill"
	onTimeoutPause = "pause"
)

// sandboxJSON is E2B's Sandbox: the answer of create and connect.
type sandboxJSON struct {
	TemplateID      string  `json:"templateID"`
	SandboxID       string  `json:"sandboxID"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       *time.Time        `json:"endAt,omitempty"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	Lifecycle   lifecycleJSON     `json:"lifecycle"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// tenantHandler authenticates a control request by its API key.
func (f *frontEnd) tenantHandler(h func(http.ResponseWriter, *http.Request, *Tenant) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := f.keys.Load().Tenant(r.Header.Get("X-API-Key"))
		if t == nil {
			writeError(w, errUnauthorized)
			return
		}
		done, err := f.slots.take(t, f.cfg.MaxTenantRequests)
		if err != nil {
			f.metrics.refused.Inc()
			writeError(w, err)
			return
		}
		defer done()
		if err := h(w, r, t); err != nil {
			f.fail(w, r, err)
		}
	}
}

// decodeBody decodes a JSON body (an empty one is {}), bounded; unknown fields are allowed
// (the SDK sends options this front end does not read, each checked where it matters).
func decodeBody(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return badRequest("the body could not be read")
	}
	if len(data) > maxRequestBody {
		return &problem{http.StatusRequestEntityTooLarge, 0, "the body is larger than 64 KiB"}
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return badRequest("the body is not valid JSON for this call: %v", err)
	}
	return nil
}

// timeoutOf is a request's timeout in seconds, the default when absent.
func (f *frontEnd) timeoutOf(seconds *int64) (time.Duration, error) {
	if seconds == nil {
		return defaultTimeout, nil
	}
	d := time.Duration(*seconds) * time.Second
	if *seconds < 1 || d > f.cfg.MaxTimeout {
		return 0, badRequest("timeout must be 1..%d seconds", int64(f.cfg.MaxTimeout/time.Second))
	}
	return d, nil
}

// create serves POST /v2/sandboxes: a new binding's environment from the template's
// profile, with the timeout as its deadline, answered once it is ready and its run is held
// (the SDK calls envd right after).
func (f *frontEnd) create(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	var in struct {
		TemplateID   string            `json:"templateID"`
		Timeout      *int64            `json:"timeout"`
		AutoPause    *bool             `json:"autoPause"`
		Metadata     map[string]string `json:"metadata"`
		EnvVars      map[string]string `json:"envVars"`
		MCP          json.RawMessage   `json:"mcp"`
		VolumeMounts []json.RawMessage `json:"volumeMounts"`
	}
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	switch {
	case len(in.MCP) > 0 && string(in.MCP) != "null":
		return unsupported("MCP gateways are not supported (docs/e2b.md)")
	case len(in.VolumeMounts) > 0:
		return unsupported("volume mounts are not supported: the workspace is the sandbox's volume (docs/e2b.md)")
	}
	template := in.TemplateID
	if template == "" {
		template = defaultTemplate
	}
	profile, ok := f.cfg.Templates[template]
	if !ok {
		return &problem{http.StatusNotFound, 0, "template '" + template + "' not found"}
	}
	timeout, err := f.timeoutOf(in.Timeout)
	if err != nil {
		return err
	}
	onTimeout, action := onTimeoutKill, client.DeadlineDelete
	if in.AutoPause != nil && *in.AutoPause {
		onTimeout, action = onTimeoutPause, client.DeadlineSuspend
	}
	md, err := metadataOf(in.Metadata, in.EnvVars)
	if err != nil {
		return err
	}
	md[metaTemplate], md[metaOnTimeout] = template, onTimeout
	if err := checkMetadata(md); err != nil {
		return err
	}
	id := newSandboxID()
	// The reference is committed after the answer (the sandbox id the SDK holds is the
	// record a two-phase caller would keep; a pending reference serves every call alike):
	// a create from a warm pool is then one write.
	env, err := f.api.Ensure(r.Context(), client.EnsureRequest{Owner: t.Owner, BindingID: id, Profile: profile, Metadata: md,
		Deadline: &client.Deadline{After: timeout, Action: action}, KeepReferencePending: true})
	if err != nil {
		if env != nil {
			// Created but never ready in time: the caller has no id for it; it goes now
			// rather than at its timeout.
			go f.discard(env)
		}
		return err
	}
	sb := f.sandboxes.add(t, id, env)
	f.prepareRun(sb)
	f.log.Info("sandbox created", logging.KeySandbox, id, logging.KeyTenant, t.KeyID, logging.KeyProfile, profile, logging.KeyEnvironment, env.ID())
	writeJSON(w, http.StatusCreated, f.sandboxAnswer(t, id, template))
	return nil
}

func (f *frontEnd) sandboxAnswer(t *Tenant, id, template string) sandboxJSON {
	return sandboxJSON{TemplateID: template, SandboxID: id, EnvdVersion: envdVersion, EnvdAccessToken: f.keys.Load().AccessToken(t, id)}
}

// metadataOf is a create's metadata and envVars as the environment's metadata.
func metadataOf(user, envs map[string]string) (map[string]string, error) {
	md := map[string]string{}
	for k, v := range user {
		if strings.HasPrefix(k, metaPrefix) {
			return nil, badRequest("metadata keys starting with %q are reserved", metaPrefix)
		}
		md[k] = v
	}
	for k, v := range envs {
		if !validEnvName(k) {
			return nil, badRequest("envVars: %q is not an environment variable name", k)
		}
		md[metaEnv+k] = v
	}
	return md, nil
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// checkMetadata refuses metadata the API would, with E2B's 400 and the bounds in words.
func checkMetadata(md map[string]string) error {
	var fields ident.Fields
	fields.Metadata("metadata", md)
	if err := fields.Err(); err != nil {
		return badRequest("metadata and envVars together: at most %d entries, keys of [A-Za-z0-9._:-] up to %d bytes, values up to %d bytes, %d bytes in all (%v)",
			ident.MaxMetadataEntries, ident.MaxMetadataKey, ident.MaxMetadataValue, ident.MaxMetadataBytes, err)
	}
	return nil
}

// sandboxEnv is create's envVars, from the environment's metadata.
func sandboxEnv(md map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range md {
		if name, ok := strings.CutPrefix(k, metaEnv); ok {
			env[name] = v
		}
	}
	return env
}

// userMetadata is the caller's part of the metadata.
func userMetadata(md map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		if !strings.HasPrefix(k, metaPrefix) {
			out[k] = v
		}
	}
	return out
}

func detailOf(env *executionv1.Environment) detailJSON {
	md := env.GetMetadata()
	d := detailJSON{TemplateID: md[metaTemplate], SandboxID: env.GetBindingId(), StartedAt: env.GetCreatedAt().AsTime(), State: "running",
		EnvdVersion: envdVersion, Metadata: userMetadata(md), Lifecycle: lifecycleJSON{OnTimeout: md[metaOnTimeout]}}
	if paused(env.GetLifecycle()) {
		d.State = "paused"
	}
	if env.GetDeadline() != nil {
		end := env.GetDeadline().AsTime()
		d.EndAt = &end
	}
	return d
}

// find is the sandbox's environment for a control call: absent, deleted or being deleted is
// not found.
func (f *frontEnd) find(ctx context.Context, t *Tenant, id string) (*executionv1.Environment, error) {
	env, err := f.sandboxes.lookup(ctx, t, id)
	if err != nil {
		return nil, err
	}
	if gone(env.GetLifecycle()) {
		return nil, errSandboxNotFound
	}
	return env, nil
}

func (f *frontEnd) handle(t *Tenant, env *executionv1.Environment) *client.Environment {
	return f.api.Handle(client.AttachRequest{Owner: t.Owner, BindingID: env.GetBindingId(), ID: env.GetRef().GetId(), Revision: env.GetRef().GetRevision()})
}

// getInfo serves GET /sandboxes/{id}.
func (f *frontEnd) getInfo(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	env, err := f.find(r.Context(), t, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, detailOf(env))
	return nil
}

// list serves GET /v2/sandboxes (and /sandboxes, the running ones): the key's sandboxes,
// filtered by state and metadata (every pair must match), a page at a time with the next
// page's token in X-Next-Token.
func (f *frontEnd) list(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	q := r.URL.Query()
	states := map[string]bool{"running": true, "paused": true}
	if s := q.Get("state"); s != "" {
		states = map[string]bool{}
		for _, v := range strings.Split(s, ",") {
			if v != "running" && v != "paused" {
				return badRequest("state must be running or paused")
			}
			states[v] = true
		}
	} else if r.URL.Path == "/sandboxes" {
		states = map[string]bool{"running": true}
	}
	var lifecycle []executionv1.LifecycleState
	for l := range executionv1.LifecycleState_name {
		if state := executionv1.LifecycleState(l); running(state) && states["running"] || paused(state) && states["paused"] {
			lifecycle = append(lifecycle, state)
		}
	}
	md, err := metadataQuery(q.Get("metadata"))
	if err != nil {
		return err
	}
	limit := maxListLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxListLimit {
			return badRequest("limit must be 1..%d", maxListLimit)
		}
	}
	envs, next, err := f.api.ListEnvironmentsPage(r.Context(), t.Owner, client.ListOptions{Lifecycle: lifecycle, Metadata: md, PageSize: uint32(limit)}, q.Get("nextToken"))
	if err != nil {
		return err
	}
	out := []detailJSON{}
	for _, env := range envs {
		out = append(out, detailOf(env))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metadataQuery decodes the SDK's metadata filter: URL-encoded pairs, URL-encoded as a
// whole (E2B's parseFilters).
func metadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	whole, err := url.QueryUnescape(s)
	if err != nil {
		return nil, badRequest("metadata is not URL-encoded")
	}
	md := map[string]string{}
	for pair := range strings.SplitSeq(whole, "&") {
		k, v, _ := strings.Cut(pair, "=")
		key, err1 := url.QueryUnescape(k)
		value, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil || key == "" {
			return nil, badRequest("metadata must be key=value pairs")
		}
		if strings.HasPrefix(key, metaPrefix) {
			return nil, badRequest("metadata keys starting with %q are reserved", metaPrefix)
		}
		md[key] = value
	}
	if err := checkMetadata(md); err != nil {
		return nil, err
	}
	return md, nil
}

// kill serves DELETE /sandboxes/{id}: the owner's delete of the environment (executor and
// workspace), answered once started.
func (f *frontEnd) kill(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	env, err := f.find(r.Context(), t, r.PathValue("id"))
	if err != nil {
		return err
	}
	f.sandboxes.drop(t, env.GetBindingId())
	h := f.handle(t, env)
	// A pause or resume in progress holds a delete up: it waits, as E2B's kill of a
	// pausing sandbox does.
	if err := untilSettled(r.Context(), func() error { return h.Delete(r.Context(), 0) }); err != nil {
		return err
	}
	f.log.Info("sandbox killed", logging.KeySandbox, env.GetBindingId(), logging.KeyTenant, t.KeyID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout serves POST /sandboxes/{id}/timeout: the deadline moved to now + timeout, with
// the sandbox's action.
func (f *frontEnd) setTimeout(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	if in.Timeout == nil {
		return badRequest("timeout is required")
	}
	timeout, err := f.timeoutOf(in.Timeout)
	if err != nil {
		return err
	}
	env, err := f.find(r.Context(), t, r.PathValue("id"))
	if err != nil {
		return err
	}
	if !running(env.GetLifecycle()) {
		return errSandboxNotFound // E2B's answer for a paused sandbox
	}
	if err := f.handle(t, env).SetDeadline(r.Context(), &client.Deadline{After: timeout, Action: actionOf(env)}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func actionOf(env *executionv1.Environment) client.DeadlineAction {
	if env.GetMetadata()[metaOnTimeout] == onTimeoutPause {
		return client.DeadlineSuspend
	}
	return client.DeadlineDelete
}

// pause serves POST /sandboxes/{id}/pause: the deadline cleared (a paused sandbox does not
// time out), the shared run released, the environment suspended. 409 when paused already.
func (f *frontEnd) pause(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	id := r.PathValue("id")
	env, err := f.find(r.Context(), t, id)
	if err != nil {
		return err
	}
	if paused(env.GetLifecycle()) {
		writeJSON(w, http.StatusConflict, map[string]any{"code": http.StatusConflict, "message": "sandbox " + id + " is already paused"})
		return nil
	}
	h := f.handle(t, env)
	// A suspension waits for no claim: first as it is; refused for the front end's own
	// (every replica's), that one is joined and released, and the suspension asked again.
	// The deadline is cleared only once the suspension was accepted (a paused sandbox does
	// not time out): a refused pause leaves the sandbox as it was, its timeout included.
	suspend := func() error { return untilSettled(r.Context(), func() error { return h.Suspend(r.Context()) }) }
	err = suspend()
	if errors.Is(err, client.ErrRunClaimHeld) {
		sb, gerr := f.sandboxes.get(r.Context(), t, id)
		if gerr != nil {
			return gerr
		}
		if _, gerr = f.run(r.Context(), sb); gerr != nil {
			return gerr
		}
		if gerr = sb.release(r.Context()); gerr != nil {
			return gerr
		}
		err = suspend()
	}
	if err != nil {
		if errors.Is(err, client.ErrConflict) {
			// 409 is the SDK's "already paused": this is not that.
			err = &problem{http.StatusServiceUnavailable, connect.CodeUnavailable, "the sandbox could not be paused now: " + classify(err).message}
		}
		return err
	}
	f.sandboxes.drop(t, id)
	if err := h.SetDeadline(r.Context(), nil); err != nil {
		f.log.Warn("a paused sandbox's timeout not cleared", logging.KeySandbox, id, logging.KeyError, err)
	}
	// E2B's pause answers once the sandbox is paused: a connect right after resumes it.
	if err := f.waitFor(r.Context(), t, id, func(env *executionv1.Environment) bool {
		return env.GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDED
	}); err != nil {
		return err
	}
	f.log.Info("sandbox paused", logging.KeySandbox, id, logging.KeyTenant, t.KeyID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect serves POST /v2/sandboxes/{id}/connect (and the older /sandboxes/{id}/resume): a
// paused sandbox resumes (201) with a new deadline; a running one (200) keeps its deadline
// unless the new one is later.
func (f *frontEnd) connect(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	var in struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &in); err != nil {
		return err
	}
	timeout, err := f.timeoutOf(in.Timeout)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	env, err := f.find(r.Context(), t, id)
	if err != nil {
		return err
	}
	h := f.handle(t, env)
	status := http.StatusOK
	// The timeout first: a sandbox resumed is never left without one (a resume that then
	// fails to become ready still ends at it).
	if d := env.GetDeadline(); paused(env.GetLifecycle()) || d == nil || d.AsTime().Before(time.Now().Add(timeout)) {
		if err := h.SetDeadline(r.Context(), &client.Deadline{After: timeout, Action: actionOf(env)}); err != nil {
			return err
		}
	}
	if paused(env.GetLifecycle()) {
		status = http.StatusCreated
		if err := untilSettled(r.Context(), func() error { return h.Resume(r.Context()) }); err != nil {
			return err
		}
	}
	if err := h.WaitReady(r.Context()); err != nil {
		return err
	}
	sb := f.sandboxes.add(t, id, h)
	f.prepareRun(sb)
	writeJSON(w, status, f.sandboxAnswer(t, id, env.GetMetadata()[metaTemplate]))
	return nil
}

// sandboxMetrics serves GET /sandboxes/{id}/metrics: no samples yet (the usage ledger will give
// them), which the SDK takes as an empty series.
func (f *frontEnd) sandboxMetrics(w http.ResponseWriter, r *http.Request, t *Tenant) error {
	if _, err := f.find(r.Context(), t, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, []any{})
	return nil
}

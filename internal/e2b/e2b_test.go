package e2b

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/execplane/execplane/pkg/client"
	process "github.com/execplane/execplane/proto/envd/process"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

func TestWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"":                     ".",
		"~":                    ".",
		"/home/user":           ".",
		"/home/user/":          ".",
		"/home/user/a/b.txt":   "a/b.txt",
		"~/a":                  "a",
		"a/./b":                "a/b",
		"../x":                 "../x", // left for the gateway to refuse (PATH_ESCAPE)
		"/home/user/a/../b":    "b",
		"/home/user//a":        "a",
		"/home/username/x.txt": "",
		"/tmp/x":               "",
		"/home/user/../etc":    "",
		"/":                    "",
	} {
		got, err := workspacePath(in)
		var outside errOutsideWorkspace
		if want == "" {
			if !errors.As(err, &outside) {
				t.Errorf("workspacePath(%q) = %q, %v; want it refused as outside the workspace", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for rel, want := range map[string]string{".": "/home/user", "": "/home/user", "a/b": "/home/user/a/b"} {
		if got := e2bPath(rel); got != want {
			t.Errorf("e2bPath(%q) = %q, want %q", rel, got, want)
		}
	}
}

// writeKeys writes a key file with two keys and returns its path and the keys.
func writeKeys(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token.key"), []byte("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func hashOf(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }

func TestKeysAndTokens(t *testing.T) {
	good := "version: 1\ntokenKeyFile: token.key\nkeys:\n" +
		"  - {id: a, sha256: " + hashOf("e2b_a") + ", owner: {issuer: https://idp, subject: alice}}\n" +
		"  - {id: b, sha256: " + hashOf("e2b_b") + ", owner: {issuer: https://idp, subject: bob}}\n"
	keys, err := LoadKeys(writeKeys(t, good))
	if err != nil {
		t.Fatal(err)
	}
	a, b := keys.Tenant("e2b_a"), keys.Tenant("e2b_b")
	if a == nil || b == nil || a.Owner.Subject != "alice" || b.Owner.Subject != "bob" {
		t.Fatalf("tenants %+v %+v", a, b)
	}
	for _, k := range []string{"", "e2b_c", "E2B_A", hashOf("e2b_a")} {
		if keys.Tenant(k) != nil {
			t.Errorf("key %q found a tenant", k)
		}
	}
	tok := keys.AccessToken(a, "isandbox1")
	if strings.Contains(tok, "e2b_a") || !strings.HasPrefix(tok, "a.") {
		t.Fatalf("token %q", tok)
	}
	if got := keys.Verify(tok, "isandbox1"); got != a {
		t.Fatalf("Verify = %+v", got)
	}
	forged := "b" + tok[1:] // another key's id with a's MAC
	// A key id with dots is cut at the last one (the MAC has none).
	dotted := "version: 1\ntokenKeyFile: token.key\nkeys:\n  - {id: team.a, sha256: " + hashOf("e2b_d") + ", owner: {issuer: https://idp, subject: d}}\n"
	dk, err := LoadKeys(writeKeys(t, dotted))
	if err != nil {
		t.Fatal(err)
	}
	if td := dk.Tenant("e2b_d"); dk.Verify(dk.AccessToken(td, "isandbox1"), "isandbox1") != td {
		t.Fatal("a token of a key id with a dot did not verify")
	}
	// A key replaced under the same id (a rotation) ends the tokens of the one before.
	rotated, err := LoadKeys(writeKeys(t, strings.Replace(good, hashOf("e2b_a"), hashOf("e2b_a2"), 1)))
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Verify(tok, "isandbox1") != nil {
		t.Fatal("a token outlived its key's rotation under the same id")
	}
	for name, c := range map[string][2]string{
		"another sandbox": {tok, "isandbox2"},
		"another key's":   {forged, "isandbox1"},
		"no separator":    {strings.ReplaceAll(tok, ".", ""), "isandbox1"},
		"empty":           {"", "isandbox1"},
		"cut":             {tok[:len(tok)-2], "isandbox1"},
	} {
		if keys.Verify(c[0], c[1]) != nil {
			t.Errorf("%s: the token verified", name)
		}
	}

	for name, body := range map[string]string{
		"unknown field":   good + "extra: 1\n",
		"duplicate id":    strings.Replace(good, "{id: b,", "{id: a,", 1),
		"duplicate hash":  strings.Replace(good, hashOf("e2b_b"), hashOf("e2b_a"), 1),
		"uppercase hash":  strings.Replace(good, hashOf("e2b_a"), strings.ToUpper(hashOf("e2b_a")), 1),
		"no keys":         "version: 1\ntokenKeyFile: token.key\nkeys: []\n",
		"version 2":       strings.Replace(good, "version: 1", "version: 2", 1),
		"token key above": strings.Replace(good, "token.key", "../token.key", 1),
		"no token key":    strings.Replace(good, "token.key", "missing.key", 1),
		"two documents":   good + "---\nversion: 1\n",
		"bad owner":       strings.Replace(good, "subject: bob", "subject: \"b o b\"", 1),
	} {
		if _, err := LoadKeys(writeKeys(t, body)); !errors.Is(err, ErrInvalidKeys) {
			t.Errorf("%s: %v, want ErrInvalidKeys", name, err)
		}
	}
}

// The SDK's metadata filter, encoded as it sends it (each key and value URL-encoded, the
// pairs joined as a query, that query URL-encoded as the parameter), decodes to the pairs.
func TestMetadataQuery(t *testing.T) {
	pairs := url.Values{"team": {"v a/l&"}, "kind": {"x=y"}}
	inner := url.Values{}
	for k, v := range pairs {
		inner.Set(url.QueryEscape(k), url.QueryEscape(v[0]))
	}
	q := url.Values{"metadata": {inner.Encode()}}
	parsed, _ := url.ParseQuery(q.Encode())
	got, err := metadataQuery(parsed.Get("metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"team": "v a/l&", "kind": "x=y"}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"e2b.template%3Dx", "%3Dv", "k y%3Dv"} {
		if _, err := metadataQuery(bad); err == nil {
			t.Errorf("metadataQuery(%q) accepted", bad)
		}
	}
}

func TestMetadataOf(t *testing.T) {
	md, err := metadataOf(map[string]string{"team": "a"}, map[string]string{"FOO": "bar"})
	if err != nil {
		t.Fatal(err)
	}
	md[metaTemplate] = "base"
	if diff := cmp.Diff(map[string]string{"team": "a", "e2b.env.FOO": "bar", "e2b.template": "base"}, md); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff(map[string]string{"FOO": "bar"}, sandboxEnv(md)); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff(map[string]string{"team": "a"}, userMetadata(md)); diff != "" {
		t.Fatal(diff)
	}
	for name, c := range map[string][2]map[string]string{
		"a reserved key":   {{"e2b.template": "x"}, nil},
		"a bad env name":   {nil, {"1FOO": "x"}},
		"an env name with": {nil, {"A-B": "x"}},
	} {
		if _, err := metadataOf(c[0], c[1]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A durable command's end as envd's end event: the exit code and Go's text in status and
// error, -1 and the signal's text when it did not exit.
func TestEndEvent(t *testing.T) {
	str := func(s string) *string { return &s }
	for name, c := range map[string]struct {
		info *client.CommandInfo
		want *process.ProcessEvent_EndEvent
	}{
		"exit 0": {&client.CommandInfo{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: &client.CommandResult{ExitCode: 0}},
			&process.ProcessEvent_EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}},
		"exit 3": {&client.CommandInfo{State: executionv1.CommandState_COMMAND_STATE_FAILED, Result: &client.CommandResult{ExitCode: 3}},
			&process.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: str("exit status 3")}},
		"killed": {&client.CommandInfo{State: executionv1.CommandState_COMMAND_STATE_CANCELLED, Result: &client.CommandResult{ExitCode: -1}},
			&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: str("signal: killed")}},
		"signalled": {&client.CommandInfo{State: executionv1.CommandState_COMMAND_STATE_SIGNALED, Result: &client.CommandResult{ExitCode: -1, Signal: 15}},
			&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: terminated", Error: str("signal: terminated")}},
		"abandoned": {&client.CommandInfo{State: executionv1.CommandState_COMMAND_STATE_ABANDONED, Message: "the executor was replaced"},
			&process.ProcessEvent_EndEvent{ExitCode: -1, Status: "abandoned", Error: str("the command's executor stopped before it ended: the executor was replaced")}},
	} {
		got := endEvent(c.info).GetEnd()
		if got.GetExitCode() != c.want.GetExitCode() || got.GetExited() != c.want.GetExited() || got.GetStatus() != c.want.GetStatus() ||
			(got.Error == nil) != (c.want.Error == nil) || got.GetError() != c.want.GetError() {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

// Errors reach the SDK as E2B's: the HTTP status it reads and the Connect code it maps.
func TestClassify(t *testing.T) {
	apiErr := func(c codes.Code, reason string) error { return &client.Error{Code: c, Reason: reason, Message: "m"} }
	for name, c := range map[string]struct {
		err    error
		status int
		code   connect.Code
	}{
		"absent sandbox":     {errSandboxNotFound, http.StatusNotFound, connect.CodeNotFound},
		"sandbox not up":     {errSandboxNotRunning, http.StatusBadGateway, connect.CodeUnavailable},
		"outside":            {errOutsideWorkspace{"/tmp/x"}, http.StatusBadRequest, connect.CodeInvalidArgument},
		"not found":          {apiErr(codes.NotFound, "NOT_FOUND"), http.StatusNotFound, connect.CodeNotFound},
		"path escape":        {apiErr(codes.PermissionDenied, "PATH_ESCAPE"), http.StatusBadRequest, connect.CodeInvalidArgument},
		"wrong type":         {apiErr(codes.FailedPrecondition, "WRONG_TYPE"), http.StatusBadRequest, connect.CodeInvalidArgument},
		"capacity":           {apiErr(codes.ResourceExhausted, "LIMIT_EXCEEDED"), http.StatusTooManyRequests, connect.CodeResourceExhausted},
		"not ready":          {apiErr(codes.FailedPrecondition, "NOT_READY"), http.StatusBadGateway, connect.CodeUnavailable},
		"gateway away":       {apiErr(codes.Unavailable, "UNAVAILABLE"), http.StatusServiceUnavailable, connect.CodeUnavailable},
		"front end refused":  {apiErr(codes.Unauthenticated, "UNAUTHENTICATED"), http.StatusInternalServerError, connect.CodeInternal},
		"something else":     {errors.New("boom"), http.StatusInternalServerError, connect.CodeInternal},
		"an unsupported one": {unsupported("x"), http.StatusNotImplemented, connect.CodeUnimplemented},
	} {
		p := classify(c.err)
		if p.status != c.status || p.code != c.code {
			t.Errorf("%s: %d %v, want %d %v", name, p.status, p.code, c.status, c.code)
		}
		if strings.Contains(p.message, "boom") {
			t.Errorf("%s: an unexpected error's text reached the caller: %q", name, p.message)
		}
	}
}

func TestSandboxIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newSandboxID()
		if !validSandboxID(id) || seen[id] {
			t.Fatalf("id %q (seen %v)", id, seen[id])
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "x", "I" + strings.Repeat("a", 19), "i" + strings.Repeat("A", 19), "i" + strings.Repeat("a", 20), "i" + strings.Repeat("-", 19)} {
		if validSandboxID(bad) {
			t.Errorf("%q valid", bad)
		}
	}
}

func TestBasicUser(t *testing.T) {
	for header, want := range map[string]string{"": "", "Basic dXNlcjo=": "user", "Basic cm9vdDo=": "root"} {
		if got, err := basicUser(header); err != nil || got != want {
			t.Errorf("basicUser(%q) = %q, %v", header, got, err)
		}
	}
	for _, bad := range []string{"Bearer x", "Basic !!", "Basic dXNlcg=="} {
		if _, err := basicUser(bad); err == nil {
			t.Errorf("basicUser(%q) accepted", bad)
		}
	}
	if checkUser("user") != nil || checkUser("") != nil || checkUser("root") == nil {
		t.Fatal("checkUser")
	}
}

// An upload is held in memory up to memorySpool bytes and in a file beyond, and refused
// past the limit, whatever the length hint says.
func TestSpool(t *testing.T) {
	dir := t.TempDir()
	payload := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7)
		}
		return b
	}
	for name, c := range map[string]struct {
		size, limit int
		hint        int64
		inFile      bool
		refused     bool
	}{
		"small, no hint":          {size: 10, limit: 100, hint: -1},
		"at the limit":            {size: 100, limit: 100, hint: 100},
		"over the limit":          {size: 101, limit: 100, hint: -1, refused: true},
		"over, the hint lying":    {size: 101, limit: 100, hint: 5, refused: true},
		"at the memory spool":     {size: memorySpool, limit: 2 * memorySpool, hint: memorySpool},
		"past it, to a file":      {size: memorySpool + 1, limit: 2 * memorySpool, hint: -1, inFile: true},
		"to a file, at the limit": {size: 2 * memorySpool, limit: 2 * memorySpool, hint: -1, inFile: true},
		"to a file, over it":      {size: 2*memorySpool + 1, limit: 2 * memorySpool, hint: -1, refused: true},
	} {
		want := payload(c.size)
		u, err := spool(bytes.NewReader(want), int64(c.limit), c.hint, memorySpool, dir)
		if c.refused {
			var p *problem
			if !errors.As(err, &p) || p.status != http.StatusRequestEntityTooLarge {
				t.Errorf("%s: %v, want 413", name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := u.content
		if c.inFile {
			if u.file == nil {
				t.Fatalf("%s: held in memory", name)
			}
			got, _ = io.ReadAll(u.file)
		}
		if u.size != int64(c.size) || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes kept (size %d), want %d", name, len(got), u.size, c.size)
		}
		u.discard()
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("spool files left behind: %v", left)
	}
}

// A sandbox serving a request (a stream) is not swept however long it is quiet; an idle one
// is; a second add of an open sandbox answers the entry in use.
func TestSandboxCache(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSandboxes(nil)
	s.now = func() time.Time { return now }
	ta, tb := &Tenant{KeyID: "a", Hash: "ha"}, &Tenant{KeyID: "b", Hash: "hb"}
	streaming, idle := s.add(ta, "i1", nil), s.add(ta, "i2", nil)
	if again := s.add(ta, "i1", nil); again != streaming {
		t.Fatal("a second add replaced the open entry")
	}
	if other := s.add(tb, "i1", nil); other == streaming {
		t.Fatal("another key's entry is the same")
	}
	release := streaming.hold()
	now = now.Add(idleAfter + time.Second)
	s.sweep()
	if streaming.dropped.Load() || !idle.dropped.Load() {
		t.Fatalf("after the sweep: streaming dropped %v, idle dropped %v", streaming.dropped.Load(), idle.dropped.Load())
	}
	release() // touches it: idle from now
	s.sweep()
	if streaming.dropped.Load() {
		t.Fatal("swept right after its request ended")
	}
	now = now.Add(idleAfter + time.Second)
	s.sweep()
	if !streaming.dropped.Load() {
		t.Fatal("not swept once idle")
	}
	if fresh := s.add(ta, "i1", nil); fresh == streaming || fresh.dropped.Load() {
		t.Fatal("an add after the sweep answered the dropped entry")
	}
}

func TestTenantSlots(t *testing.T) {
	s := tenantSlots{used: map[string]int{}}
	a, b := &Tenant{Hash: "a"}, &Tenant{Hash: "b"}
	var done []func()
	for range 2 {
		d, err := s.take(a, 2)
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, d)
	}
	if _, err := s.take(a, 2); !errors.Is(err, errTooManyRequests) {
		t.Fatalf("a third request of a key at 2: %v", err)
	}
	if d, err := s.take(b, 2); err != nil {
		t.Fatalf("another key refused: %v", err)
	} else {
		d()
	}
	done[0]()
	if d, err := s.take(a, 2); err != nil {
		t.Fatalf("a slot given back was not reusable: %v", err)
	} else {
		d()
	}
	done[1]()
	if len(s.used) != 0 {
		t.Fatalf("slots left counted: %v", s.used)
	}
}

// The key file is read again when it changes: a key added serves, one removed no longer
// does, and a file that does not load leaves the keys in use.
func TestKeysReload(t *testing.T) {
	entry := func(id, key string) string {
		return "  - {id: " + id + ", sha256: " + hashOf(key) + ", owner: {issuer: https://idp, subject: " + id + "}}\n"
	}
	path := writeKeys(t, "version: 1\ntokenKeyFile: token.key\nkeys:\n"+entry("a", "e2b_a"))
	keys, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	f := newFrontEnd(Config{KeysFile: path}, hclog.NewNullLogger(), nil, keys, nil)
	st, _ := os.Stat(path)
	last := f.reloadKeys(st.ModTime())
	if f.keys.Load() != keys {
		t.Fatal("an unchanged file was loaded again")
	}
	rewrite := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		last = last.Add(time.Second)
		if err := os.Chtimes(path, last, last); err != nil {
			t.Fatal(err)
		}
	}
	rewrite("version: 1\ntokenKeyFile: token.key\nkeys:\n" + entry("b", "e2b_b"))
	last = f.reloadKeys(last.Add(-time.Second))
	if f.keys.Load().Tenant("e2b_b") == nil || f.keys.Load().Tenant("e2b_a") != nil {
		t.Fatal("the rotation did not take: b should serve, a no longer")
	}
	rewrite("version: 2\n")
	f.reloadKeys(last.Add(-time.Second))
	if f.keys.Load().Tenant("e2b_b") == nil {
		t.Fatal("a broken file replaced the keys in use")
	}
}

// Routes are labelled from bounded sets: envd's procedures and the mux's patterns, never a
// path a caller made up; a stream's writer still flushes through the recorder.
func TestMetricsRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, func() int { return 3 })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	mux.HandleFunc("/process.Process/", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the recorder hides Flush")
		}
		_, _ = w.Write([]byte("x"))
	})
	h := m.observe(mux)
	for _, p := range []string{"/sandboxes/iabc", "/sandboxes/idef", "/process.Process/Start", "/process.Process/Made-Up", "/nothing/here"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "execplane_e2b_requests_total" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["route"]+" "+labels["code"]] = metric.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"GET /sandboxes/{id} 404": 2, "/process.Process/Start 200": 1, "/process.Process/ 200": 1, "other 404": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("requests by route (-want +got):\n%s", diff)
	}
}

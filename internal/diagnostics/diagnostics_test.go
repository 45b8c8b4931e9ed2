package diagnostics

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var reason atomic.Value
	reason.Store("not leader")
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "execplane_test_total", Help: "test"}))
	srv := New(addr, Checks{Ready: func() string { return reason.Load().(string) }}, reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	get := func(path string) (int, string) {
		t.Helper()
		var resp *http.Response
		for i := 0; i < 100; i++ {
			if resp, err = http.Get("http://" + addr + path); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/livez"); code != 200 || body != "ok" {
		t.Fatalf("livez %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 503 || body != "not leader" {
		t.Fatalf("readyz while not ready: %d %q", code, body)
	}
	reason.Store("")
	if code, body := get("/readyz"); code != 200 || body != "ok" {
		t.Fatalf("readyz when ready: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "execplane_test_total") {
		t.Fatalf("metrics %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// Profiles are served only when asked for.
func TestProfilingIsOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv := New("127.0.0.1:0", Checks{Ready: func() string { return "" }, Profiling: on}, prometheus.NewRegistry())
		rec := httptest.NewRecorder()
		srv.srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap", nil))
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
			t.Errorf("profiling %v: /debug/pprof/heap answered %d, want %d", on, rec.Code, want)
		}
	}
}

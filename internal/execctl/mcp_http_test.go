package execctl

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The HTTP endpoint's token: the environment's when given (long enough), else a fresh one
// written to the token file, mode 0600, replacing — never following — what was there; with
// neither, --http is refused.
func TestHTTPToken(t *testing.T) {
	if _, err := httpToken("", ""); err == nil || !strings.Contains(err.Error(), "bearer token") {
		t.Fatalf("no token and no file: %v", err)
	}
	if _, err := httpToken("short", ""); err == nil {
		t.Fatal("a short token was accepted")
	}
	long := strings.Repeat("x", minTokenBytes)
	if got, err := httpToken(long, "/nonexistent/never-written"); err != nil || got != long {
		t.Fatalf("the environment's token: %q %v", got, err)
	}
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "token")
	if err := os.Symlink(victim, file); err != nil {
		t.Fatal(err)
	}
	token, err := httpToken("", file)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("token %q", token)
	}
	data, err := os.ReadFile(file)
	if err != nil || string(data) != token+"\n" {
		t.Fatalf("the token file holds %q, %v", data, err)
	}
	if fi, err := os.Lstat(file); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("the token file: %v %v", fi.Mode(), err)
	}
	if kept, _ := os.ReadFile(victim); string(kept) != "keep" {
		t.Fatal("the token was written through a symbolic link")
	}
	if again, _ := httpToken("", file); again == token {
		t.Fatal("a second start reused the token")
	}
}

// Only a request with the bearer token reaches the MCP handler.
func TestBearer(t *testing.T) {
	reached := 0
	h := bearer("secret-token", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	for header, want := range map[string]int{
		"":                     http.StatusUnauthorized,
		"Bearer wrong":         http.StatusUnauthorized,
		"bearer secret-token":  http.StatusUnauthorized,
		"Basic secret-token":   http.StatusUnauthorized,
		"Bearer secret-token ": http.StatusUnauthorized,
		"Bearer secret-token":  http.StatusOK,
	} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%q: %d, want %d", header, w.Code, want)
		}
	}
	if reached != 1 {
		t.Fatalf("the handler was reached %d times, want 1", reached)
	}
}

package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func decodeLines(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not one JSON object: %q: %v", line, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestJSONShapeAndKeys(t *testing.T) {
	var out bytes.Buffer
	logger, err := New(Options{Name: "gateway", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("rpc served", KeyRPC, "Files", KeyEnvironment, "env-1", KeyCode, "OK")
	lines := decodeLines(t, &out)
	if len(lines) != 1 {
		t.Fatalf("want 1 line, got %d", len(lines))
	}
	m := lines[0]
	for _, want := range []string{"@timestamp", "@level", "@message", "@module", KeyRPC, KeyEnvironment, KeyCode} {
		if _, ok := m[want]; !ok {
			t.Errorf("missing key %q in %v", want, m)
		}
	}
	if m["@module"] != "gateway" || m["@level"] != "info" || m["@message"] != "rpc served" {
		t.Errorf("unexpected envelope: %v", m)
	}
}

func TestTextFormatIsNotJSON(t *testing.T) {
	var out bytes.Buffer
	logger, err := New(Options{Name: "execctl", Format: FormatText, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	logger.Warn("careful", KeyCount, 3)
	if s := out.String(); strings.HasPrefix(s, "{") || !strings.Contains(s, "[WARN]") || !strings.Contains(s, "count=3") {
		t.Fatalf("text output = %q", s)
	}
}

func TestLevelFilters(t *testing.T) {
	var out bytes.Buffer
	logger, err := New(Options{Name: "x", Level: "warn", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("dropped")
	logger.Error("kept")
	lines := decodeLines(t, &out)
	if len(lines) != 1 || lines[0]["@message"] != "kept" {
		t.Fatalf("got %v", lines)
	}
}

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	err := Options{Format: "yaml", Level: "loud"}.Validate()
	if !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("want ErrInvalidOptions, got %v", err)
	}
	for _, want := range []string{`"yaml"`, `"loud"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, err := New(Options{Format: "xml", Output: &bytes.Buffer{}}); err == nil {
		t.Fatal("New accepted an invalid format")
	}
	if _, err := New(Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New without output: %v", err)
	}
}

func TestKlogIsRouted(t *testing.T) {
	var out bytes.Buffer
	logger, err := New(Options{Name: "controller", Level: "debug", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	RouteKlog(logger)
	t.Cleanup(klog.ClearLogger)

	klog.InfoS("lease acquired", "lease", "execplane-controller")
	klog.V(4).InfoS("watch restarted", "resource", "pods")
	klog.ErrorS(errors.New("boom"), "list failed", "resource", "pvcs")
	klog.Flush()

	lines := decodeLines(t, &out)
	if len(lines) != 3 {
		t.Fatalf("want 3 routed lines, got %d: %s", len(lines), out.String())
	}
	if lines[0]["@module"] != "controller.klog" || lines[0]["@level"] != "info" || lines[0]["lease"] != "execplane-controller" {
		t.Errorf("info line: %v", lines[0])
	}
	if lines[1]["@level"] != "debug" || lines[1]["resource"] != "pods" {
		t.Errorf("V(4) line should be debug: %v", lines[1])
	}
	if lines[2]["@level"] != "error" || lines[2][KeyError] != "boom" {
		t.Errorf("error line: %v", lines[2])
	}
}

func TestKlogVerboseDroppedAtInfo(t *testing.T) {
	var out bytes.Buffer
	logger, err := New(Options{Name: "gateway", Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	RouteKlog(logger)
	t.Cleanup(klog.ClearLogger)
	klog.V(5).InfoS("chatter")
	klog.Flush()
	if out.Len() != 0 {
		t.Fatalf("verbose klog leaked at info: %s", out.String())
	}
}

func TestKeysAreUniqueSnakeCase(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys {
		if seen[k] {
			t.Errorf("duplicate key %q", k)
		}
		seen[k] = true
		if strings.ToLower(k) != k || strings.ContainsAny(k, " -.") {
			t.Errorf("key %q is not lower snake case", k)
		}
	}
	if !slices.Contains(Keys, KeyRequestID) {
		t.Error("Keys misses request_id")
	}
}

func TestEscapeQuotesHostileBytes(t *testing.T) {
	cases := map[string]string{
		"plain.txt":          "plain.txt",
		"a\nforged=1":        `"a\nforged=1"`,
		string([]byte{0xff}): `"\xff"`,
	}
	for in, want := range cases {
		if got := Escape([]byte(in)); got != want {
			t.Errorf("Escape(%q) = %s, want %s", in, got, want)
		}
	}
}

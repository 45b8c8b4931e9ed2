package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
)

type fakeConfig struct {
	Name string
}

func (c *fakeConfig) RegisterFlags(fs *flag.FlagSet) { fs.StringVar(&c.Name, "name", c.Name, "a name") }

func (c *fakeConfig) Validate() error {
	var p Problems
	p.Required("name", c.Name)
	return p.Err()
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{flag.ErrHelp, ExitOK},
		{Usagef("bad"), ExitUsage},
		{fmt.Errorf("wrapped: %w", ErrInvalidConfig), ExitUsage},
		{errors.New("boom"), ExitFailure},
	}
	for _, tc := range cases {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		wantDone bool
		wantCode int
		wantOut  string
	}{
		{"valid", []string{"--name", "x"}, false, ExitOK, ""},
		{"invalid", nil, true, ExitUsage, ""},
		{"unknown flag", []string{"--nope"}, true, ExitUsage, ""},
		{"positional", []string{"--name", "x", "extra"}, true, ExitUsage, ""},
		{"version", []string{"--version"}, true, ExitOK, "bin "},
		{"check-config ok", []string{"--name", "x", "--check-config"}, true, ExitOK, "configuration is valid"},
		{"check-config bad", []string{"--check-config"}, true, ExitUsage, ""},
		{"help", []string{"-h"}, true, ExitOK, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			done, err := Load("bin", &fakeConfig{}, tc.args, &out, &errOut)
			if done != tc.wantDone || ExitCode(err) != tc.wantCode {
				t.Fatalf("done=%v err=%v, want done=%v code=%d", done, err, tc.wantDone, tc.wantCode)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("stdout %q lacks %q", out.String(), tc.wantOut)
			}
		})
	}
}

func TestExecutePrintsErrorsAndMapsCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Execute(func(context.Context, []string, io.Writer, io.Writer) error {
		return Usagef("no command")
	}, nil, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "error: usage error: no command") {
		t.Fatalf("code=%d stderr=%q", code, errOut.String())
	}
	errOut.Reset()
	if code := Execute(func(context.Context, []string, io.Writer, io.Writer) error { return nil }, nil, &out, &errOut); code != ExitOK || errOut.Len() != 0 {
		t.Fatalf("code=%d stderr=%q", code, errOut.String())
	}
}

func TestProblemsCollectsAll(t *testing.T) {
	var p Problems
	if p.Err() != nil {
		t.Fatal("empty Problems reported an error")
	}
	p.Address("a", "nohostport")
	p.Address("b", "host:99999")
	p.AbsolutePath("c", "rel", false)
	p.OneOf("d", "x", "y", "z")
	err := p.Err()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	for _, want := range []string{"--a", "--b", "--c", "--d"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s missing from %v", want, err)
		}
	}
}

type codedErr struct{ quiet bool }

func (codedErr) Error() string { return "coded" }
func (codedErr) ExitCode() int { return 42 }
func (e codedErr) Quiet() bool { return e.quiet }

func TestErrorsChooseTheirExitCode(t *testing.T) {
	if got := ExitCode(fmt.Errorf("wrapped: %w", codedErr{})); got != 42 {
		t.Fatalf("got %d", got)
	}
	var stderr strings.Builder
	code := Execute(func(context.Context, []string, io.Writer, io.Writer) error { return codedErr{quiet: true} }, nil, io.Discard, &stderr)
	if code != 42 || stderr.Len() != 0 {
		t.Fatalf("quiet error: code %d, stderr %q", code, stderr.String())
	}
}

package cli

import (
	"flag"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInterspersedPutsFlagsFirst(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"flags after arguments", []string{"ENV", "path", "-o", "json"}, []string{"-o", "json", "--", "ENV", "path"}},
		{"a flag's value that looks like an argument", []string{"--client", "ci:attest", "DIR"}, []string{"--client", "ci:attest", "--", "DIR"}},
		{"name=value", []string{"DIR", "--client=ci"}, []string{"--client=ci", "--", "DIR"}},
		{"a boolean takes no value", []string{"-v", "DIR"}, []string{"-v", "--", "DIR"}},
		{"everything after -- is an argument", []string{"ENV", "--", "ls", "-o", "x"}, []string{"--", "ENV", "ls", "-o", "x"}},
		{"- is an argument (stdin)", []string{"ENV", "-", "main.py"}, []string{"--", "ENV", "-", "main.py"}},
		{"an unknown flag is left to Parse", []string{"DIR", "--nope"}, []string{"--nope", "--", "DIR"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.String("o", "", "")
			fs.String("client", "", "")
			fs.Bool("v", false, "")
			if diff := cmp.Diff(c.want, Interspersed(fs, c.args)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

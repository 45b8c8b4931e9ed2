package execctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
)

// runStore keeps the runs `execctl run acquire` took, one file per environment (mode 0600
// in a 0700 directory): the grant inside is a credential, bound to this client's identity.
type runStore struct{ dir string }

// envIDPattern is the environment id form (a DNS-1123 label): checked before it names a file.
var envIDPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// runs returns the store: $EXECPLANE_STATE_DIR, else $XDG_STATE_HOME/execctl, else
// ~/.local/state/execctl.
func (in *invocation) runs() (runStore, error) {
	dir := in.getenv("EXECPLANE_STATE_DIR")
	if dir == "" {
		base := in.getenv("XDG_STATE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return runStore{}, fmt.Errorf("no state directory: set EXECPLANE_STATE_DIR (%w)", err)
			}
			base = filepath.Join(home, ".local", "state")
		}
		dir = filepath.Join(base, "execctl")
	}
	return runStore{dir: filepath.Join(dir, "runs")}, nil
}

func (s runStore) path(envID string) (string, error) {
	if !envIDPattern.MatchString(envID) {
		return "", cli.Usagef("environment id %q: must be a DNS-1123 label", envID)
	}
	return filepath.Join(s.dir, envID+".json"), nil
}

func (s runStore) save(st client.RunState) error {
	p, err := s.path(st.EnvironmentID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(s.dir, 0o700); err != nil { // an existing directory too
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	// A unique temporary file, synced, then renamed: concurrent saves never mix.
	f, err := os.CreateTemp(s.dir, "."+st.EnvironmentID+"-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func (s runStore) load(envID string) (client.RunState, error) {
	var st client.RunState
	p, err := s.path(envID)
	if err != nil {
		return st, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return st, &exitError{code: ExitNotFound, err: fmt.Errorf("no run held on %s here: take one with 'execctl run acquire'", envID)}
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil || st.EnvironmentID != envID {
		return st, fmt.Errorf("%s: not a run of %s", p, envID)
	}
	return st, nil
}

func (s runStore) remove(envID string) error {
	p, err := s.path(envID)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// resume returns the saved run on envID.
func (in *invocation) resume(envID string) (*client.Run, runStore, error) {
	store, err := in.runs()
	if err != nil {
		return nil, store, err
	}
	st, err := store.load(envID)
	if err != nil {
		return nil, store, err
	}
	c, err := in.dial()
	if err != nil {
		return nil, store, err
	}
	return c.ResumeRun(st, 0), store, nil
}

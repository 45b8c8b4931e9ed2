package e2b

import (
	"fmt"
	"path"
	"strings"
)

// homeDir is E2B's home and default working directory, which is the workspace: the executor
// image mounts (or links) the workspace there and sets HOME to it, so that a path written by
// files.write is the one `cat` reads in a command.
const homeDir = "/home/user"

// errOutsideWorkspace: the file API reaches the workspace only (docs/e2b.md "Paths").
type errOutsideWorkspace struct{ path string }

func (e errOutsideWorkspace) Error() string {
	return fmt.Sprintf("path '%s' is outside %s: execplane's file calls reach the workspace only (commands may still use /tmp)", e.path, homeDir)
}

// workspacePath maps an E2B path onto the workspace: "/home/user/a", "~/a" and "a" are the
// workspace's "a"; "/home/user", "~" and "" its root ("."). Any other absolute path is
// refused; ".." that climbs out of the workspace is left for the gateway to refuse
// (PATH_ESCAPE), as it resolves paths beneath the root itself.
func workspacePath(p string) (string, error) {
	switch {
	case p == "" || p == "~":
		return ".", nil
	case strings.HasPrefix(p, "~/"):
		p = p[2:]
	case strings.HasPrefix(p, "/"):
		clean := path.Clean(p)
		if clean == homeDir {
			return ".", nil
		}
		rel, ok := strings.CutPrefix(clean, homeDir+"/")
		if !ok {
			return "", errOutsideWorkspace{p}
		}
		return rel, nil
	}
	if clean := path.Clean(p); clean != "" {
		return clean, nil
	}
	return ".", nil
}

// e2bPath is the absolute E2B path of a workspace path.
func e2bPath(rel string) string {
	if rel == "" || rel == "." {
		return homeDir
	}
	return homeDir + "/" + strings.TrimPrefix(rel, "./")
}

// Package version reports the build's version. Version and Commit are set at link time
// (-X github.com/execplane/execplane/internal/version.Version=...) by the Makefile; a build
// without them falls back to the module information the Go toolchain records.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time. Empty values are filled from the build information.
var (
	// Version is the release, such as "v0.1.0", or "dev".
	Version = ""
	// Commit is the source revision the binary was built from.
	Commit = ""
)

// Info is the version of one binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the version of the running binary.
func Get() Info {
	info := Info{
		Version:   Version,
		Commit:    Commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if build, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && build.Main.Version != "" && build.Main.Version != "(devel)" {
			info.Version = build.Main.Version
		}
		for _, s := range build.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String renders the version on one line, as `--version` prints it.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}

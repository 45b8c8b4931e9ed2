// Package logging builds the hclog loggers every execplane binary uses, routes klog (and so
// client-go) into them, and fixes the vocabulary of log keys.
//
// Invariants:
//   - Keys come from the constants in keys.go; a value is never a grant, a key, a certificate
//     private part or file content. Callers pass identifiers, counts and typed errors only.
//   - Production output is JSON, one object per line, with "@timestamp", "@level",
//     "@message" and "@module" fields (hclog's JSON shape); text output is for humans.
//   - klog is routed once per process (RouteKlog); its messages keep their key/value pairs and
//     arrive under the "klog" sub-logger.
package logging

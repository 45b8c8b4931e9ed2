package profile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// encodingVersion is written into every canonical encoding. It changes only when the
// representation of an existing field changes; a new optional field is omitted while empty,
// so adding one leaves every existing digest as it was.
const encodingVersion = 1

// digestPrefix starts every digest, naming the hash as OCI digests do.
const digestPrefix = "sha256:"

// digest returns "sha256:" and the lowercase hex SHA-256 of s's canonical encoding.
func digest(s *ProfileSpec) (string, error) {
	enc, err := canonicalEncoding(s)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(enc)
	return digestPrefix + hex.EncodeToString(sum[:]), nil
}

// canonicalEncoding returns the canonical JSON of a normalised, valid spec, as
// docs/profiles.md specifies it: one JSON object, keys sorted bytewise at every level, no
// insignificant whitespace, absent and empty optional fields omitted, quantities as decimal
// strings of whole bytes or of millicores with an "m" suffix, the command duration as
// integer nanoseconds. Every string in a valid spec is printable ASCII and every number an
// integer below 2^53, so the output is also the RFC 8785 (JCS) form of the same document.
//
// The profile's name is not part of the encoding: the digest identifies what an environment
// is built from, and two names for the same spec build the same thing.
func canonicalEncoding(s *ProfileSpec) ([]byte, error) {
	doc := map[string]any{
		"encodingVersion":    encodingVersion,
		"image":              s.Image,
		"helperPath":         s.HelperPath,
		"maxFileBytes":       s.MaxFileBytes,
		"maxCommandBytes":    s.MaxCommandBytes,
		"maxCommandDuration": s.MaxCommandDuration.Nanoseconds(),
		"maxEnvironments":    s.MaxEnvironments,
	}
	putString(doc, "storageClass", s.StorageClass)
	putString(doc, "runtimeClassName", s.RuntimeClassName)
	putString(doc, "helperImage", s.HelperImage)
	if s.WorkspacePath != DefaultWorkspacePath {
		// Only when not the default: the digests of profiles written before the field
		// existed stay what they were.
		putString(doc, "workspacePath", s.WorkspacePath)
	}
	putBytes(doc, "storageSize", s.StorageSize)
	putMillicores(doc, "cpuRequest", s.CPURequest)
	putMillicores(doc, "cpuLimit", s.CPULimit)
	putBytes(doc, "memoryRequest", s.MemoryRequest)
	putBytes(doc, "memoryLimit", s.MemoryLimit)
	putBytes(doc, "ephemeralStorageRequest", s.EphemeralStorageRequest)
	putBytes(doc, "ephemeralStorageLimit", s.EphemeralStorageLimit)
	putBytes(doc, "tmpSizeLimit", s.TmpSizeLimit)
	if len(s.ImagePullSecrets) > 0 {
		doc["imagePullSecrets"] = s.ImagePullSecrets // operator order: the Pod lists them so
	}
	if len(s.NodeSelector) > 0 {
		doc["nodeSelector"] = s.NodeSelector // a map: encoding/json sorts its keys
	}
	if len(s.Tolerations) > 0 {
		ts := make([]map[string]any, len(s.Tolerations))
		for i := range s.Tolerations {
			ts[i] = canonicalToleration(&s.Tolerations[i])
		}
		doc["tolerations"] = ts // operator order: the Pod lists them so
	}
	if c := s.Commands; c != nil {
		// Only what is set, so that profiles from before durable commands keep their digest.
		cmds := map[string]any{}
		putInt(cmds, "maxDetached", c.MaxDetached)
		putInt(cmds, "spoolBytes", c.SpoolBytes)
		putInt(cmds, "retainRecords", c.RetainRecords)
		if c.MaxDuration != nil {
			cmds["maxDuration"] = c.MaxDuration.Nanoseconds()
		}
		if c.RetainFor != nil {
			cmds["retainFor"] = c.RetainFor.Nanoseconds()
		}
		if len(cmds) > 0 {
			doc["commands"] = cmds
		}
	}
	if len(s.Capabilities) > 0 {
		caps := slices.Clone(s.Capabilities)
		slices.Sort(caps) // a set: its order carries no meaning
		doc["capabilities"] = caps
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Valid specs contain no <, > or &, but the canonical form must not depend on that.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// canonicalToleration encodes one toleration. An empty operator is written as "Equal", the
// value Kubernetes gives it; other empty fields are omitted.
func canonicalToleration(t *corev1.Toleration) map[string]any {
	m := map[string]any{}
	op := t.Operator
	if op == "" {
		op = corev1.TolerationOpEqual
	}
	m["operator"] = string(op)
	putString(m, "key", t.Key)
	putString(m, "value", t.Value)
	putString(m, "effect", string(t.Effect))
	if t.TolerationSeconds != nil {
		m["tolerationSeconds"] = *t.TolerationSeconds
	}
	return m
}

func putString(m map[string]any, key, value string) {
	if value != "" {
		m[key] = value
	}
}

// putBytes writes a whole-byte quantity as its decimal byte count ("1073741824" for 1Gi).
func putBytes(m map[string]any, key string, q *resource.Quantity) {
	if q != nil {
		m[key] = strconv.FormatInt(q.Value(), 10)
	}
}

// putMillicores writes a CPU quantity as its millicore count and "m" ("1500m" for 1.5).
func putMillicores(m map[string]any, key string, q *resource.Quantity) {
	if q != nil {
		m[key] = strconv.FormatInt(q.MilliValue(), 10) + "m"
	}
}

// putInt sets a non-zero integer (zero is an absent optional field).
func putInt(doc map[string]any, key string, v int64) {
	if v != 0 {
		doc[key] = v
	}
}

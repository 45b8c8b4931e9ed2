package highwater

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/execplane/execplane/pkg/grant"
)

// KeyGrantKeys holds the grant-key set of the accepted bundle: every kid with its public
// key, state and verification window — what grant.CheckRotation compares the next set
// with. Public halves only: the mark holds nothing secret.
const KeyGrantKeys = "grantKeys"

// maxKeysBytes bounds the recorded key set: grant.MaxKeys keys of about 200 bytes each fit
// many times over, and a larger value is not one this package wrote.
const maxKeysBytes = 64 << 10

// keyRecord is one grant key as the mark records it.
type keyRecord struct {
	ID          string         `json:"id"`
	Public      string         `json:"public"`
	State       grant.KeyState `json:"state"`
	VerifyFrom  time.Time      `json:"verifyFrom"`
	VerifyUntil *time.Time     `json:"verifyUntil,omitempty"`
}

// encodeKeys is the recorded form of a key set: JSON, keys ordered by kid, so that the same
// set always encodes the same.
func encodeKeys(set *grant.KeySet) (string, error) {
	keys := set.Keys()
	records := make([]keyRecord, 0, len(keys))
	for _, k := range keys {
		r := keyRecord{ID: k.ID, Public: base64.StdEncoding.EncodeToString(k.Public), State: k.State, VerifyFrom: k.VerifyFrom.UTC()}
		if !k.VerifyUntil.IsZero() {
			until := k.VerifyUntil.UTC()
			r.VerifyUntil = &until
		}
		records = append(records, r)
	}
	b, err := json.Marshal(records)
	return string(b), err
}

// decodeKeys parses a recorded key set strictly (unknown fields, trailing data, a bad key or
// an inconsistent set are errors); "" is no recorded set.
func decodeKeys(s string) (*grant.KeySet, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > maxKeysBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(s), maxKeysBytes)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var records []keyRecord
	if err := dec.Decode(&records); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("trailing data")
	}
	keys := make([]grant.Key, 0, len(records))
	for _, r := range records {
		pub, err := base64.StdEncoding.Strict().DecodeString(r.Public)
		if err != nil {
			return nil, fmt.Errorf("key %q: public key: %w", r.ID, err)
		}
		k := grant.Key{ID: r.ID, Public: pub, State: r.State, VerifyFrom: r.VerifyFrom}
		if r.VerifyUntil != nil {
			k.VerifyUntil = *r.VerifyUntil
		}
		keys = append(keys, k)
	}
	return grant.NewKeySet(keys...)
}

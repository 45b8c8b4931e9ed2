package e2b

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	kjson "sigs.k8s.io/json"

	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/ident"
	problems "github.com/execplane/execplane/pkg/problem"
	"github.com/execplane/execplane/pkg/strictyaml"
)

// Bounds of the key file.
const (
	// maxKeyFileBytes: a Secret cannot be larger.
	maxKeyFileBytes = 1 << 20
	// maxKeys bounds the API keys of one front end: tenants, not end users (a tenant's
	// end users are its business, as owners are a platform's).
	maxKeys = 4096
	// tokenKeyBytes is the HMAC key of envd access tokens.
	tokenKeyBytes = 32
)

// ErrInvalidKeys wraps every problem of a key file.
var ErrInvalidKeys = errors.New("invalid e2b key file")

// keyFile is the front end's security material (docs/e2b.md "Keys"): the API keys, each
// stored as the SHA-256 of the key with the owner it acts for, and the key that signs the
// sandboxes' envd access tokens.
type keyFile struct {
	Version int `json:"version"`
	// TokenKeyFile names a file holding the standard base64 of 32 random bytes, relative to
	// the key file's directory.
	TokenKeyFile string   `json:"tokenKeyFile"`
	Keys         []apiKey `json:"keys"`
}

type apiKey struct {
	// ID names the key in logs and tokens: 1..64 bytes of [A-Za-z0-9._:-].
	ID string `json:"id"`
	// SHA256 is the lowercase hex SHA-256 of the key as the SDK sends it.
	SHA256 string   `json:"sha256"`
	Owner  keyOwner `json:"owner"`
}

type keyOwner struct {
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
}

// Keys is a loaded key file: immutable, replaced whole on reload.
type Keys struct {
	byHash   map[[sha256.Size]byte]*Tenant
	byID     map[string]*Tenant
	tokenKey []byte
}

// Tenant is the holder of one API key: the owner its calls act for.
type Tenant struct {
	KeyID string
	Owner client.Owner
	// Hash is the key's SHA-256 (hex): with the id, what a token and a cached sandbox are
	// bound to, so that a key replaced under the same id (a rotation) ends both.
	Hash string
}

// LoadKeys reads and checks a key file, reporting every problem at once.
func LoadKeys(path string) (*Keys, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKeys, err)
	}
	var p problems.List
	var f keyFile
	doc, err := strictyaml.Document(data, "keys")
	switch {
	case err != nil:
		p.AddErr(err)
	case doc == nil:
		p.Add("keys", "is empty")
	default:
		raw, _ := json.Marshal(doc)
		strict, err := kjson.UnmarshalStrict(raw, &f)
		if err != nil {
			p.Add("keys", "%v", err)
		}
		for _, e := range strict {
			p.Add("keys", "%v", e)
		}
	}
	if !p.Empty() {
		return nil, p.Err(ErrInvalidKeys)
	}
	k := &Keys{byHash: map[[sha256.Size]byte]*Tenant{}, byID: map[string]*Tenant{}}
	if f.Version != 1 {
		p.Add("version", "must be 1")
	}
	if len(f.Keys) == 0 || len(f.Keys) > maxKeys {
		p.Add("keys", "must have 1..%d entries", maxKeys)
	}
	for i, key := range f.Keys {
		at := fmt.Sprintf("keys[%d]", i)
		var fields ident.Fields
		fields.Identifier(at+".id", key.ID)
		if len(key.ID) > 64 {
			fields.Fail(at+".id", "must be at most 64 bytes")
		}
		fields.Owner(at+".owner", key.Owner.Issuer, key.Owner.Subject)
		if err := fields.Err(); err != nil {
			p.AddErr(err)
		}
		sum, err := hex.DecodeString(key.SHA256)
		if err != nil || len(sum) != sha256.Size || strings.ToLower(key.SHA256) != key.SHA256 {
			p.Add(at+".sha256", "must be 64 lowercase hex digits (sha256sum of the key)")
			continue
		}
		t := &Tenant{KeyID: key.ID, Owner: client.Owner{Issuer: key.Owner.Issuer, Subject: key.Owner.Subject}, Hash: key.SHA256}
		if _, dup := k.byID[key.ID]; dup {
			p.Add(at+".id", "is used twice")
		}
		if _, dup := k.byHash[[sha256.Size]byte(sum)]; dup {
			p.Add(at+".sha256", "is the hash of another entry's key")
		}
		k.byID[key.ID], k.byHash[[sha256.Size]byte(sum)] = t, t
	}
	if f.TokenKeyFile == "" || filepath.IsAbs(f.TokenKeyFile) || strings.Contains(f.TokenKeyFile, "..") {
		p.Add("tokenKeyFile", "must name a file beside the key file")
	} else if raw, err := readBounded(filepath.Join(filepath.Dir(path), f.TokenKeyFile)); err != nil {
		p.Add("tokenKeyFile", "%v", err)
	} else if key, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(raw))); err != nil || len(key) != tokenKeyBytes {
		p.Add("tokenKeyFile", "must hold the standard base64 of %d random bytes (openssl rand -base64 32)", tokenKeyBytes)
	} else {
		k.tokenKey = key
	}
	if !p.Empty() {
		return nil, p.Err(ErrInvalidKeys)
	}
	return k, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeyFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(path), maxKeyFileBytes)
	}
	return data, nil
}

// Tenant returns the holder of an API key as the SDK sent it, or nil. The key is compared
// by its SHA-256 (a map lookup on a hash reveals nothing of the stored hashes by timing).
func (k *Keys) Tenant(apiKey string) *Tenant {
	if apiKey == "" {
		return nil
	}
	return k.byHash[sha256.Sum256([]byte(apiKey))]
}

// The envd access token of a sandbox is "<key id>.<base64url HMAC-SHA256(token key, key id,
// key hash, owner, sandbox id)>": the SDK keeps it for the sandbox's life (grants last
// minutes), so it is the front end's own credential for that sandbox, scoped to it and to
// the key that created it, and it dies with the key (a rotation, even under the same id; an
// id given to another owner) or the token key.
const tokenDomain = "execplane-e2b-envd-token-v1"

// AccessToken returns the sandbox's envd access token for a tenant.
func (k *Keys) AccessToken(t *Tenant, sandbox string) string {
	return t.KeyID + "." + base64.RawURLEncoding.EncodeToString(k.mac(t, sandbox))
}

// Verify returns the tenant an envd access token of the sandbox was issued to, or nil.
func (k *Keys) Verify(token, sandbox string) *Tenant {
	// The MAC's base64url has no dot; a key id may have some.
	dot := strings.LastIndexByte(token, '.')
	if dot < 0 {
		return nil
	}
	t := k.byID[token[:dot]]
	got, err := base64.RawURLEncoding.DecodeString(token[dot+1:])
	if t == nil || err != nil || !hmac.Equal(got, k.mac(t, sandbox)) {
		return nil
	}
	return t
}

func (k *Keys) mac(t *Tenant, sandbox string) []byte {
	h := hmac.New(sha256.New, k.tokenKey)
	for _, f := range []string{tokenDomain, t.KeyID, t.Hash, t.Owner.Issuer, t.Owner.Subject, sandbox} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/execplane/execplane/pkg/problem"

	"k8s.io/apimachinery/pkg/api/resource"
	kjson "sigs.k8s.io/json"

	"github.com/execplane/execplane/pkg/strictyaml"
)

// MaxProfilesFileBytes bounds the profiles file. It is checked before any decoding so that a
// mistaken path (a log, a binary) or a hostile file cannot make every gateway and controller
// replica buffer and parse an unbounded document; a generous profiles file is a few KiB.
const MaxProfilesFileBytes = 1 << 20

// maxQuantityTextBytes bounds a quantity written as a string. Kubernetes' parser rounds
// values with a large negative exponent using arbitrary-precision arithmetic whose cost grows
// with the exponent, so quantity strings are checked against quantityTextPattern and this
// length before they reach resource.ParseQuantity.
const maxQuantityTextBytes = 64

// quantityTextPattern is the Kubernetes quantity grammar with the decimal exponent limited
// to two digits (|exponent| <= 99), which is ample for sizes and CPU counts.
var quantityTextPattern = regexp.MustCompile(
	`^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,2}|[KMGTPE]i|[numkMGTPE])?$`)

// quantityFields lists the json names of ProfileSpec's quantity fields, derived from the
// type so that a new quantity field is prechecked without anyone remembering to add it.
var quantityFields = func() []string {
	var names []string
	qt := reflect.TypeFor[*resource.Quantity]()
	st := reflect.TypeFor[ProfileSpec]()
	for i := range st.NumField() {
		f := st.Field(i)
		if f.Type == qt {
			names = append(names, jsonName(f))
		}
	}
	return names
}()

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// ParseOptions are registry-wide settings applied while loading profiles.
type ParseOptions struct {
	// RequireDigestPinnedImages refuses any image not pinned by digest
	// (name[:tag]@sha256:<64 lowercase hex>), so that a tag moved in the registry cannot
	// change what an environment runs.
	RequireDigestPinnedImages bool
}

// file is the profiles file's top level. Each profile is decoded on its own so that its
// problems carry its name and one bad profile does not hide another's problems.
type file struct {
	Profiles map[string]json.RawMessage `json:"profiles"`
}

// LoadProfiles reads and parses the profiles file at path with default options.
func LoadProfiles(path string) (*Registry, error) {
	return ParseOptions{}.Load(path)
}

// Parse parses a profiles document with default options.
func Parse(data []byte) (*Registry, error) {
	return ParseOptions{}.Parse(data)
}

// Load reads the profiles file at path, refusing files over MaxProfilesFileBytes before
// decoding anything, and parses it with o. A file that cannot be read yields its I/O error,
// wrapped (errors.Is(err, fs.ErrNotExist) holds for a missing file); a bad document yields
// an error wrapping ErrInvalidProfile.
func (o ParseOptions) Load(path string) (*Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles file: %w", err)
	}
	defer f.Close()
	// Read one byte past the cap so an oversized file is recognised without reading it all.
	data, err := io.ReadAll(io.LimitReader(f, MaxProfilesFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("profiles file %s: %w", path, err)
	}
	r, err := o.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("profiles file %s: %w", path, err)
	}
	return r, nil
}

// Parse decodes a profiles document strictly, validates every profile with o and returns the
// immutable registry. Every problem is reported at once; the error wraps ErrInvalidProfile.
func (o ParseOptions) Parse(data []byte) (*Registry, error) {
	var p problem.List
	specs := decode(data, &p)
	return newRegistry(specs, o, &p)
}

// decode turns a profiles document into specs, refusing anything that is not exactly one
// YAML document of string-keyed maps whose keys all match ProfileSpec's fields, with the
// expected types, once. A problem with the document as a whole stops decoding; a profile
// with problems is recorded in p and left out of the result.
func decode(data []byte, p *problem.List) map[string]ProfileSpec {
	if len(data) > MaxProfilesFileBytes {
		p.Add("document", "exceeds %d bytes", MaxProfilesFileBytes)
		return nil
	}
	doc, err := strictyaml.Document(data, "document")
	if err != nil {
		p.AddErr(err)
		return nil
	}
	jsonBytes, err := json.Marshal(doc)
	if err != nil {
		p.AddErr(err)
		return nil
	}
	var f file
	if !unmarshalStrict(p, "", jsonBytes, &f) {
		return nil
	}
	top, _ := doc.(map[string]any)
	generic, _ := top["profiles"].(map[string]any)
	names := make([]string, 0, len(f.Profiles))
	for name := range f.Profiles {
		names = append(names, name)
	}
	sort.Strings(names)
	specs := make(map[string]ProfileSpec, len(names))
	for _, name := range names {
		path := profilePath(name)
		if !checkQuantityTexts(p, path, generic[name]) {
			continue
		}
		var s ProfileSpec
		if unmarshalStrict(p, path, f.Profiles[name], &s) {
			specs[name] = s
		}
	}
	return specs
}

// unmarshalStrict decodes JSON into v with sigs.k8s.io/json, which, unlike encoding/json,
// matches keys case-sensitively (encoding/json would take "Image" for "image") and reports
// every unknown and duplicate field with its path. It records problems under path and
// reports whether v was decoded cleanly.
func unmarshalStrict(p *problem.List, path string, data []byte, v any) bool {
	strictErrs, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		p.AddErr(prefixed(path, err))
		return false
	}
	for _, e := range strictErrs {
		var fe kjson.FieldError
		if errors.As(e, &fe) && path != "" {
			fe.SetFieldPath(path + "." + fe.FieldPath())
			p.AddErr(e)
		} else {
			p.AddErr(prefixed(path, e))
		}
	}
	return len(strictErrs) == 0
}

func prefixed(path string, err error) error {
	if path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// checkQuantityTexts refuses quantity strings that resource.ParseQuantity would be slow on
// (see maxQuantityTextBytes) in the generic form of the profile at path, and reports whether
// all were acceptable. Numbers need no check: YAML numbers are already int64 or float64,
// whose exponents are small.
func checkQuantityTexts(p *problem.List, path string, profile any) bool {
	spec, _ := profile.(map[string]any)
	ok := true
	for _, field := range quantityFields {
		s, isString := spec[field].(string)
		if isString && (len(s) > maxQuantityTextBytes || !quantityTextPattern.MatchString(s)) {
			p.Add(path+"."+field, "%s is not a quantity of at most %d bytes with an exponent of at most two digits",
				strconv.Quote(truncate(s, maxQuantityTextBytes)), maxQuantityTextBytes)
			ok = false
		}
	}
	return ok
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

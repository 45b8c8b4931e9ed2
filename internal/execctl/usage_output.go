package execctl

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Tables show usage in the units people price it in; -o json and export keep the API's.
const (
	kibSecondsPerGiBHour = 1024 * 1024 * 3600
	bytesPerMiB          = 1 << 20
	// shortHash is how much of an owner or client hash a table shows: enough to tell them
	// apart by eye (-o json and export carry the whole).
	shortHash = 12
)

// counterHeaders head the columns of counterCells.
var counterHeaders = []string{"CPU (CORE-S)", "MEMORY (GIB-H)", "PEAK MEMORY (MIB)", "STORAGE (GIB-H)", "READY", "SUSPENDED", "COMMANDS", "IN", "OUT"}

// counterCells are counters in human units: CPU core-seconds, memory and storage
// GiB-hours, the peak working set in MiB, durations, a count and byte sizes.
func counterCells(c *executionv1.UsageCounters) []string {
	return []string{
		strconv.FormatFloat(float64(c.GetCpuNanoseconds())/float64(time.Second), 'f', 3, 64),
		gibHours(c.GetMemoryKibSeconds()),
		strconv.FormatFloat(float64(c.GetMemoryPeakBytes())/bytesPerMiB, 'f', 1, 64),
		gibHours(c.GetStorageKibSeconds()),
		millis(c.GetReadyMilliseconds()),
		millis(c.GetSuspendedMilliseconds()),
		strconv.FormatInt(c.GetCommands(), 10),
		humanBytes(c.GetBytesIn()),
		humanBytes(c.GetBytesOut()),
	}
}

func gibHours(kibSeconds int64) string {
	return strconv.FormatFloat(float64(kibSeconds)/kibSecondsPerGiBHour, 'f', 3, 64)
}

// millis is a duration of milliseconds, to the second once it is one.
func millis(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

// humanBytes is n in IEC units (1.5 KiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// instant is a timestamp in RFC 3339, UTC; "" when unset.
func instant(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(hash string) string {
	if len(hash) <= shortHash {
		return orDash(hash)
	}
	return hash[:shortHash] + "…"
}

// windowHeaders head a window's cells, then its counters'.
var windowHeaders = append([]string{"START", "END", "CLOSED"}, counterHeaders...)

func windowCells(w *executionv1.UsageWindow) []string {
	return append([]string{instant(w.GetStart()), instant(w.GetEnd()), strconv.FormatBool(w.GetClosed())}, counterCells(w.GetUsage())...)
}

// usageTables shows an environment's ledger: what it is, then its totals and windows.
func (in *invocation) usageTables(u *client.Usage) error {
	err := in.table([]string{"ENV", "REVISION", "BINDING", "PROFILE", "AS OF", "ENDED"}, [][]string{{u.GetEnvironment().GetId(),
		orDash(u.GetEnvironment().GetRevision()), orDash(u.GetBindingId()), orDash(u.GetProfile()), orDash(instant(u.GetAsOf())), orDash(instant(u.GetEndedAt()))}})
	if err != nil {
		return err
	}
	// The totals are everything since creation, the windows older ones included.
	rows := [][]string{append([]string{"total", "-", "-"}, counterCells(u.GetTotals())...)}
	for _, w := range u.GetWindows() {
		rows = append(rows, windowCells(w))
	}
	fmt.Fprintln(in.out)
	return in.table(windowHeaders, rows)
}

// usageKeyHeaders are the key columns a grouping fills.
var usageKeyHeaders = map[client.UsageGroupBy][]string{
	client.GroupByEnvironment: {"ENV", "BINDING", "PROFILE"},
	client.GroupByBinding:     {"BINDING"},
	client.GroupByOwner:       {"OWNER"},
	client.GroupByClient:      {"CLIENT"},
}

func usageRecordHeaders(by client.UsageGroupBy) []string {
	return append(append([]string{}, usageKeyHeaders[by]...), windowHeaders...)
}

// usageRecordRow is a ListUsage record under usageRecordHeaders(by).
func usageRecordRow(by client.UsageGroupBy, r *client.UsageRecord) []string {
	var key []string
	switch by {
	case client.GroupByEnvironment:
		key = []string{orDash(r.GetEnvironment().GetId()), orDash(r.GetBindingId()), orDash(r.GetProfile())}
	case client.GroupByBinding:
		key = []string{orDash(r.GetBindingId())}
	case client.GroupByOwner:
		key = []string{short(r.GetOwnerHash())}
	case client.GroupByClient:
		key = []string{short(r.GetClientHash())}
	}
	return append(key, windowCells(r.GetWindow())...)
}

// exportValue is one field of an exported line: text (a JSON string) or a literal (a JSON
// number or boolean, written as is).
type exportValue struct {
	text    string
	literal bool
}

// exportField is one column of an export.
type exportField struct {
	name  string
	value func(*executionv1.UsageRecord) exportValue
}

func textField(name string, f func(*executionv1.UsageRecord) string) exportField {
	return exportField{name, func(r *executionv1.UsageRecord) exportValue { return exportValue{text: f(r)} }}
}

// exportFields are an exported line's fields in order: the window, the record's key, then
// every counter of the API under its field name (read from the message's descriptor, so
// that a counter the API adds is exported without a change here).
var exportFields = func() []exportField {
	fields := []exportField{
		textField("window_start", func(r *executionv1.UsageRecord) string { return instant(r.GetWindow().GetStart()) }),
		textField("window_end", func(r *executionv1.UsageRecord) string { return instant(r.GetWindow().GetEnd()) }),
		{"closed", func(r *executionv1.UsageRecord) exportValue {
			return exportValue{text: strconv.FormatBool(r.GetWindow().GetClosed()), literal: true}
		}},
		textField("environment", func(r *executionv1.UsageRecord) string { return r.GetEnvironment().GetId() }),
		textField("revision", func(r *executionv1.UsageRecord) string { return r.GetEnvironment().GetRevision() }),
		textField("binding", (*executionv1.UsageRecord).GetBindingId),
		textField("owner_hash", (*executionv1.UsageRecord).GetOwnerHash),
		textField("client_hash", (*executionv1.UsageRecord).GetClientHash),
		textField("profile", (*executionv1.UsageRecord).GetProfile),
	}
	counters := (&executionv1.UsageCounters{}).ProtoReflect().Descriptor().Fields()
	for i := range counters.Len() {
		fd := counters.Get(i)
		fields = append(fields, exportField{string(fd.Name()), func(r *executionv1.UsageRecord) exportValue {
			c := r.GetWindow().GetUsage()
			if c == nil {
				c = &executionv1.UsageCounters{}
			}
			v := c.ProtoReflect().Get(fd)
			if fd.Kind() == protoreflect.StringKind {
				return exportValue{text: v.String()}
			}
			return exportValue{text: fmt.Sprint(v.Interface()), literal: true}
		}})
	}
	return fields
}()

// exportWriter writes usage records as JSON lines or CSV. A CSV export starts with its
// header row, written with the first line or by flush: an export refused before any
// record writes nothing.
type exportWriter struct {
	out     io.Writer
	csv     *csv.Writer // nil for JSON lines
	started bool
}

func newExportWriter(out io.Writer, format string) *exportWriter {
	w := &exportWriter{out: out}
	if format == formatCSV {
		w.csv = csv.NewWriter(out)
	}
	return w
}

// start writes CSV's header row once (JSON lines have none).
func (w *exportWriter) start() error {
	if w.csv == nil || w.started {
		return nil
	}
	w.started = true
	names := make([]string, len(exportFields))
	for i, f := range exportFields {
		names[i] = f.name
	}
	return w.csv.Write(names)
}

// write writes one record's line.
func (w *exportWriter) write(r *executionv1.UsageRecord) error {
	if w.csv != nil {
		if err := w.start(); err != nil {
			return err
		}
		row := make([]string, len(exportFields))
		for i, f := range exportFields {
			row[i] = f.value(r).text
		}
		return w.csv.Write(row)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range exportFields {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		b.Write(name)
		b.WriteByte(':')
		v := f.value(r)
		if v.literal {
			b.WriteString(v.text)
			continue
		}
		text, err := json.Marshal(v.text)
		if err != nil {
			return err
		}
		b.Write(text)
	}
	b.WriteString("}\n")
	_, err := w.out.Write(b.Bytes())
	return err
}

// abort ends a failed export: the lines written so far are flushed, nothing more.
func (w *exportWriter) abort() {
	if w.csv != nil {
		w.csv.Flush()
	}
}

// flush ends a complete export: what CSV buffered, and its header row when no line
// came; it reports the first write error.
func (w *exportWriter) flush() error {
	if w.csv == nil {
		return nil
	}
	if err := w.start(); err != nil {
		return err
	}
	w.csv.Flush()
	return w.csv.Error()
}

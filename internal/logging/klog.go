package logging

import (
	"flag"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2"
)

var routeOnce sync.Mutex

// RouteKlog sends everything logged through klog (client-go, leader election, informers)
// to logger's "klog" sub-logger. klog verbosity V(n) maps to debug for n >= 2 and info below,
// so routine client-go chatter stays out of info logs.
func RouteKlog(logger hclog.Logger) {
	routeOnce.Lock()
	defer routeOnce.Unlock()
	// klog filters V(n) by its own -v flag before the sink sees a line: raise it when the
	// logger wants debug output, lower it otherwise.
	verbosity := "0"
	if logger.IsDebug() {
		verbosity = strconv.Itoa(klogDebugVerbosity + 2)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", verbosity) // a constant integer: cannot fail
	klog.SetLogger(logr.New(&klogSink{logger: logger.Named("klog")}))
}

// klogSink adapts hclog to logr.LogSink.
type klogSink struct {
	logger hclog.Logger
}

var _ logr.LogSink = (*klogSink)(nil)

// klogDebugVerbosity is the first klog verbosity treated as debug: client-go logs request
// traces at V(2)+ and informer internals at V(4)+.
const klogDebugVerbosity = 2

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool {
	if level >= klogDebugVerbosity {
		return s.logger.IsDebug()
	}
	return s.logger.IsInfo()
}

func (s *klogSink) Info(level int, msg string, kv ...any) {
	if level >= klogDebugVerbosity {
		s.logger.Debug(msg, kv...)
		return
	}
	s.logger.Info(msg, kv...)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	s.logger.Error(msg, append([]any{KeyError, err}, kv...)...)
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{logger: s.logger.With(kv...)}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	return &klogSink{logger: s.logger.Named(name)}
}

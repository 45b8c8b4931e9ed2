package execctl

import (
	"flag"
	"time"

	"github.com/execplane/execplane/internal/cli"
)

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
)

// maxTimeout bounds a single CLI call; commands run at most for a profile's
// maxCommandDuration (at most an hour).
const maxTimeout = 2 * time.Hour

// Config holds execctl's global flags. Each defaults from an EXECPLANE_* environment
// variable so that a shell can be set up once.
type Config struct {
	// Address is the gateway, host:port.
	Address string
	// CAFile verifies the gateway's certificate; CertFile and KeyFile are the client's.
	CAFile   string
	CertFile string
	KeyFile  string
	// ServerName overrides the name expected in the gateway's certificate.
	ServerName string
	// Output is table (for people) or json (for scripts).
	Output string
	// Timeout bounds each call.
	Timeout time.Duration
}

// DefaultConfig returns the defaults, taking EXECPLANE_ADDRESS, EXECPLANE_CA,
// EXECPLANE_CERT, EXECPLANE_KEY and EXECPLANE_SERVER_NAME from getenv.
func DefaultConfig(getenv func(string) string) Config {
	return Config{
		Address:    getenv("EXECPLANE_ADDRESS"),
		CAFile:     getenv("EXECPLANE_CA"),
		CertFile:   getenv("EXECPLANE_CERT"),
		KeyFile:    getenv("EXECPLANE_KEY"),
		ServerName: getenv("EXECPLANE_SERVER_NAME"),
		Output:     OutputTable,
		Timeout:    30 * time.Second,
	}
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Address, "address", c.Address, "gateway address host:port ($EXECPLANE_ADDRESS)")
	fs.StringVar(&c.CAFile, "ca", c.CAFile, "CA bundle verifying the gateway ($EXECPLANE_CA)")
	fs.StringVar(&c.CertFile, "cert", c.CertFile, "client certificate ($EXECPLANE_CERT)")
	fs.StringVar(&c.KeyFile, "key", c.KeyFile, "client private key ($EXECPLANE_KEY)")
	fs.StringVar(&c.ServerName, "server-name", c.ServerName, "name expected in the gateway's certificate ($EXECPLANE_SERVER_NAME)")
	fs.StringVar(&c.Output, "o", c.Output, "output format: table or json")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "deadline of each call")
}

// ValidateConnection reports every problem with the flags needed to reach a gateway.
func (c Config) ValidateConnection() error {
	var p cli.Problems
	c.validateOutput(&p)
	p.Address("address", c.Address)
	p.Required("ca", c.CAFile)
	p.Required("cert", c.CertFile)
	p.Required("key", c.KeyFile)
	return p.Err()
}

// Validate reports problems with the flags every command uses.
func (c Config) Validate() error {
	var p cli.Problems
	c.validateOutput(&p)
	return p.Err()
}

func (c Config) validateOutput(p *cli.Problems) {
	p.OneOf("o", c.Output, OutputTable, OutputJSON)
	p.DurationBetween("timeout", c.Timeout, time.Second, maxTimeout)
}

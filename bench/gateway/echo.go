package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoServerCommand is the hidden subcommand that runs the baseline server in its own
// process, as the gateway runs in its own.
const echoServerCommand = "echo-server"

// echoMethod is the baseline's one unary method: it returns its request.
const echoMethod = "/bench.Echo/Echo"

var echoService = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
}

// serveEcho serves the echo service with TLS 1.3 and a required, verified client
// certificate — the gateway's transport without its authentication, policy, limits, metrics
// or handler — and prints its address on stdout.
func serveEcho(args []string) error {
	fs := flag.NewFlagSet(echoServerCommand, flag.ContinueOnError)
	cert := fs.String("cert", "", "server certificate")
	key := fs.String("key", "", "server key")
	ca := fs.String("ca", "", "client CA bundle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(*ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return errors.New("no CA certificate")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, SessionTicketsDisabled: true}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	srv.RegisterService(&echoService, struct{}{})
	fmt.Println(l.Addr().String())
	return srv.Serve(l)
}

package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// certFiles is a key pair read from files, read again when either file
// changes (a Kubernetes secret rotated under a running pod).
type certFiles struct {
	cert, key string

	mu   sync.Mutex
	mod  time.Time
	pair *tls.Certificate
}

func newCertFiles(cert, key string) (*certFiles, error) {
	c := &certFiles{cert: cert, key: key}
	_, err := c.get()
	return c, err
}

func (c *certFiles) get() (*tls.Certificate, error) {
	var mod time.Time
	for _, f := range []string{c.cert, c.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		if fi.ModTime().After(mod) {
			mod = fi.ModTime()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pair != nil && mod.Equal(c.mod) {
		return c.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.pair != nil {
			return c.pair, nil // being rewritten: the last good pair
		}
		return nil, err
	}
	c.pair, c.mod = &pair, mod
	return c.pair, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}

// serverTLS is the RLS server's TLS (GRPC_SERVER_USE_TLS): its key pair,
// and with GRPC_CLIENT_TLS_CACERT client certificates required and
// verified, their SAN checked against GRPC_CLIENT_TLS_SAN if set.
func serverTLS(s settings) (*tls.Config, error) {
	if s.GRPCTLSCert == "" || s.GRPCTLSKey == "" {
		return nil, errors.New("GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	pair, err := newCertFiles(s.GRPCTLSCert, s.GRPCTLSKey)
	if err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT/KEY: %w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get() }}
	if s.GRPCClientCA == "" {
		return c, nil
	}
	if c.ClientCAs, err = certPool(s.GRPCClientCA); err != nil {
		return nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %w", err)
	}
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if san := s.GRPCClientSAN; san != "" {
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && chain[0].VerifyHostname(san) == nil {
					return nil
				}
			}
			return fmt.Errorf("client certificate without SAN %s", san)
		}
	}
	return c, nil
}

// xdsTLS is the xDS client's TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS): the
// server verified with CONFIG_GRPC_XDS_SERVER_TLS_CACERT (else the
// system's roots) under the name CONFIG_GRPC_XDS_SERVER_TLS_SAN (else the
// URL's host), and the client key pair if given.
func xdsTLS(s settings) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.XDSServerSAN}
	if s.XDSServerCA != "" {
		pool, err := certPool(s.XDSServerCA)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		c.RootCAs = pool
	}
	if s.XDSClientCert != "" || s.XDSClientKey != "" {
		pair, err := newCertFiles(s.XDSClientCert, s.XDSClientKey)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT/KEY: %w", err)
		}
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get() }
	}
	return c, nil
}

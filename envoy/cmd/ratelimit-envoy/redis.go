package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisClient builds the client the reference's variables describe:
// REDIS_TYPE single (REDIS_URL host:port, or a socket path with
// REDIS_SOCKET_TYPE=unix, or a redis:// URL), sentinel (REDIS_URL
// "master,host:port,host:port…") or cluster (REDIS_URL
// "host:port,host:port…"); REDIS_AUTH "password" or "user:password";
// REDIS_TLS with its certificate variables; REDIS_POOL_SIZE connections
// per node; REDIS_TIMEOUT for dialling, reading and writing. Decisions are
// bounded by SLUICE_DECISION_TIMEOUT whatever REDIS_TIMEOUT says.
func redisClient(s settings) (redis.UniversalClient, string, error) {
	user, pass := "", s.RedisAuth
	if u, p, ok := strings.Cut(s.RedisAuth, ":"); ok {
		user, pass = u, p
	}
	var tlsConfig *tls.Config
	if s.RedisTLS {
		var err error
		if tlsConfig, err = redisTLS(s); err != nil {
			return nil, "", err
		}
	}
	switch strings.ToLower(s.RedisType) {
	case "single":
		if strings.HasPrefix(s.RedisURL, "redis://") || strings.HasPrefix(s.RedisURL, "rediss://") || strings.HasPrefix(s.RedisURL, "unix://") {
			o, err := redis.ParseURL(s.RedisURL)
			if err != nil {
				return nil, "", fmt.Errorf("REDIS_URL: %w", err)
			}
			applyOptions(o, s, user, pass, tlsConfig)
			return redis.NewClient(o), "single " + o.Addr, nil
		}
		network := strings.ToLower(s.RedisSocket)
		if network != "tcp" && network != "unix" {
			return nil, "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", s.RedisSocket)
		}
		o := &redis.Options{Network: network, Addr: s.RedisURL}
		applyOptions(o, s, user, pass, tlsConfig)
		return redis.NewClient(o), "single " + network + " " + s.RedisURL, nil
	case "sentinel":
		parts := strings.Split(s.RedisURL, ",")
		if len(parts) < 2 {
			return nil, "", fmt.Errorf("REDIS_URL for REDIS_TYPE=sentinel: want <master name>,<sentinel1>,…,<sentinelN>")
		}
		o := &redis.FailoverOptions{
			MasterName: parts[0], SentinelAddrs: parts[1:], SentinelPassword: s.RedisSentAuth,
			Username: user, Password: pass, TLSConfig: tlsConfig, PoolSize: s.RedisPoolSize,
			DialTimeout: s.RedisTimeout, ReadTimeout: s.RedisTimeout, WriteTimeout: s.RedisTimeout,
			ContextTimeoutEnabled: true,
		}
		return redis.NewFailoverClient(o), "sentinel " + s.RedisURL, nil
	case "cluster":
		o := &redis.ClusterOptions{
			Addrs: strings.Split(s.RedisURL, ","), Username: user, Password: pass, TLSConfig: tlsConfig,
			PoolSize: s.RedisPoolSize, DialTimeout: s.RedisTimeout, ReadTimeout: s.RedisTimeout,
			WriteTimeout: s.RedisTimeout, ContextTimeoutEnabled: true,
		}
		return redis.NewClusterClient(o), "cluster " + s.RedisURL, nil
	}
	return nil, "", fmt.Errorf("REDIS_TYPE=%q: want single, sentinel or cluster", s.RedisType)
}

func applyOptions(o *redis.Options, s settings, user, pass string, tlsConfig *tls.Config) {
	if user != "" || pass != "" {
		o.Username, o.Password = user, pass
	}
	if tlsConfig != nil {
		o.TLSConfig = tlsConfig
	}
	o.PoolSize = s.RedisPoolSize
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = s.RedisTimeout, s.RedisTimeout, s.RedisTimeout
	o.ContextTimeoutEnabled = true
}

func redisTLS(s settings) (*tls.Config, error) {
	c := &tls.Config{}
	if s.RedisTLSCert != "" || s.RedisTLSKey != "" {
		cert, err := tls.LoadX509KeyPair(s.RedisTLSCert, s.RedisTLSKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT/KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if s.RedisTLSCA != "" {
		pem, err := os.ReadFile(s.RedisTLSCA)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: no certificate in %s", s.RedisTLSCA)
		}
		c.RootCAs = pool
	}
	if s.RedisTLSNoHost {
		// Verify the chain, not the name: Go has no switch for only that.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			opts := x509.VerifyOptions{Roots: c.RootCAs, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

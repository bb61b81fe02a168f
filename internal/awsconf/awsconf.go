// Package awsconf builds AWS SDK configuration for the binaries: the
// default credential chain against AWS, or a local endpoint (the emulator)
// with static test credentials and path-style S3 addressing.
package awsconf

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Config selects the AWS endpoint.
type Config struct {
	Region   string
	Endpoint string // empty: real AWS
	// IdleConnsPerHost is how many idle connections per host the HTTP
	// client keeps for reuse (0: the SDK's default of 10). Set it to the
	// number of calls a program has in flight at once, or each call past
	// it opens a new connection.
	IdleConnsPerHost int
}

// ResponseHeaderTimeout is how long a request may wait for the start of
// its answer once it is sent: SQS's longest poll is 20 s, and S3 answers
// in well under a second. A service that swallows requests (a network
// path that drops them, a proxy that hangs) then fails them as it would
// fail a connection, so the worker's outage handling sees it, instead of
// each call waiting for its job's whole timeout.
const ResponseHeaderTimeout = time.Minute

// RegisterFlags registers -aws-region and -aws-endpoint.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Region, "aws-region", "us-east-1", "AWS region")
	fs.StringVar(&c.Endpoint, "aws-endpoint", "", "override endpoint for SQS and S3 (local emulator); empty uses AWS")
}

// Clients returns SQS and S3 clients.
func (c Config) Clients(ctx context.Context) (*sqs.Client, *s3.Client, error) {
	cfg, err := c.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	return Local(cfg, c.Endpoint)
}

// Load returns the SDK configuration: the default credential chain, or
// static test credentials for a local endpoint.
func (c Config) Load(ctx context.Context) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(c.Region), config.WithHTTPClient(c.httpClient(ResponseHeaderTimeout))}
	if c.Endpoint != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load aws config: %w", err)
	}
	return cfg, nil
}

// httpClient is the SDK's client with the connections and the answer
// timeout set.
func (c Config) httpClient(answer time.Duration) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		if n := c.IdleConnsPerHost; n > 0 {
			t.MaxIdleConns = max(t.MaxIdleConns, 2*n)
			t.MaxIdleConnsPerHost = n
		}
		t.ResponseHeaderTimeout = answer
	})
}

// HTTPClient is the HTTP client Load gives the SDK, with a shorter answer
// timeout (for tests of what a hang does).
func (c Config) HTTPClient(answer time.Duration) aws.HTTPClient { return c.httpClient(answer) }

// Local returns clients for cfg, pointed at endpoint when it is set.
func Local(cfg aws.Config, endpoint string) (*sqs.Client, *s3.Client, error) {
	sqsc := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	s3c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// The SDK would otherwise print a plain-text warning for every
		// GetObject without a checksum, breaking the JSON log stream.
		o.DisableLogOutputChecksumValidationSkipped = true
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
	return sqsc, s3c, nil
}

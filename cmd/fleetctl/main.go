// Command fleetctl acts on a running fleet where Terraform cannot, or not
// in time. `fleetctl undo -group NAME -version N` puts an Auto Scaling
// group back on launch template version N at 3 a.m.: it cancels the
// refresh in progress and waits for the cancel however long instances
// take to finish their boots and drains, sets the group's version, and
// replaces every instance on another version, printing each step. Then
// pin N in Terraform (launch_template_version) so that the next apply
// changes nothing (terraform/README.md, "Undo").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/fleetscribe/fleetscribe/fleet"
	"github.com/fleetscribe/fleetscribe/internal/awsconf"
)

const usage = `fleetctl undo -group NAME -version N   put a group back on launch template version N and replace every other instance`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetctl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "undo" {
		fmt.Fprintln(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return errors.New("name a subcommand: undo")
	}
	fs := flag.NewFlagSet("fleetctl undo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		conf     awsconf.Config
		group    = fs.String("group", "", "the Auto Scaling group: the fleet module's name (or NAME-canary)")
		version  = fs.Int64("version", 0, "the launch template version to go back to: the release that was good (the output fleet_launch_template_version before the change)")
		timeout  = fs.Duration("timeout", 4*time.Hour, "the longest the whole undo may take (the cancel waits for boots and drains in progress, then every instance is replaced); run it again to go on")
		warmup   = fs.Duration("warmup", 300*time.Second, "the refresh's instance warm-up (the fleet module's instance_warmup_seconds)")
		poll     = fs.Duration("poll", 30*time.Second, "how often progress is read")
		endpoint = fs.String("autoscaling-endpoint", "", "override the Auto Scaling endpoint (tests); empty uses AWS")
	)
	fs.StringVar(&conf.Region, "aws-region", os.Getenv("AWS_REGION"), "AWS region of the group (default: AWS_REGION, or the profile's)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *group == "" || *version < 1 {
		fs.Usage()
		return errors.New("undo needs -group and -version (1 or more)")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	conf.Endpoint = *endpoint
	cfg, err := conf.Load(ctx)
	if err != nil {
		return err
	}
	api := autoscaling.NewFromConfig(cfg, func(o *autoscaling.Options) {
		if *endpoint != "" {
			o.BaseEndpoint = aws.String(*endpoint)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	u := &fleet.Undo{API: api, Group: *group, Version: *version, Warmup: *warmup, Poll: *poll, Out: stdout}
	return u.Run(ctx)
}

// Command kube is a real Kubernetes control plane for the Helm chart's
// checks, built from the k8s.io/kubernetes module (no binary release is
// fetched):
//
//	kube apiserver -etcd-dir DIR -etcd-port N [kube-apiserver flags]
//	    an embedded etcd on 127.0.0.1:N, then kube-apiserver against it
//	kube scheduler [kube-scheduler flags]
//
// Nothing here listens beyond the loopback interface unless its flags say
// so; deploy/helm's tests build it (cached) and start it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kube apiserver|scheduler [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "apiserver":
		os.Exit(runAPIServer(os.Args[2:]))
	case "scheduler":
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(os.Args[2:])
		os.Exit(cli.Run(cmd))
	default:
		fmt.Fprintf(os.Stderr, "kube: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// runAPIServer starts an embedded etcd, then kube-apiserver with the rest
// of args and --etcd-servers pointing at it.
func runAPIServer(args []string) int {
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	dir := fs.String("etcd-dir", "", "etcd's data folder")
	port := fs.Int("etcd-port", 0, "etcd's client port on 127.0.0.1")
	peer := fs.Int("etcd-peer-port", 0, "etcd's peer port on 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *port == 0 || *peer == 0 {
		fmt.Fprintln(os.Stderr, "kube apiserver: -etcd-dir, -etcd-port and -etcd-peer-port are required")
		return 2
	}
	stop, err := startEtcd(*dir, *port, *peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube apiserver: etcd:", err)
		return 1
	}
	defer stop()
	cmd := apiserver.NewAPIServerCommand()
	cmd.SetArgs(append(fs.Args(), fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", *port)))
	return cli.Run(cmd)
}

func startEtcd(dir string, port, peer int) (func(), error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	peers := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peer)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peers}, []url.URL{peers}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-e.Server.ReadyNotify():
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("not ready within a minute")
	}
	return e.Close, nil
}

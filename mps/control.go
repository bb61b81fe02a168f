package mps

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Control drives nvidia-cuda-mps-control.
type Control struct {
	Bin string // path of nvidia-cuda-mps-control
	// Args come before the daemon's own, for a Bin that reaches the daemon
	// elsewhere: Bin "docker", Args "compose exec -T mps
	// nvidia-cuda-mps-control" asks the daemon of a compose stack.
	Args []string
	Dirs Dirs
}

// NewControl uses the binary from PATH.
func NewControl(d Dirs) *Control { return &Control{Bin: "nvidia-cuda-mps-control", Dirs: d} }

func (c *Control) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Bin, append(slices.Clip(c.Args), args...)...)
	cmd.Env = append(cmd.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+c.Dirs.Pipe, "CUDA_MPS_LOG_DIRECTORY="+c.Dirs.Log)
	return cmd
}

// StartDaemon starts the control daemon in the background (-d).
func (c *Control) StartDaemon(ctx context.Context) error {
	out, err := c.cmd(ctx, "-d").CombinedOutput()
	if err != nil {
		return fmt.Errorf("start mps daemon: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Send writes one command to the daemon and returns its reply.
func (c *Control) Send(ctx context.Context, command string) (string, error) {
	cmd := c.cmd(ctx)
	cmd.Stdin = strings.NewReader(command + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mps control %q: %w: %s", command, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ServerList returns the PIDs of running MPS servers.
func (c *Control) ServerList(ctx context.Context) ([]int, error) {
	out, err := c.Send(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	return parsePIDs("mps server list", out)
}

// ClientList returns the PIDs of the clients of one MPS server.
func (c *Control) ClientList(ctx context.Context, serverPID int) ([]int, error) {
	out, err := c.Send(ctx, "get_client_list "+strconv.Itoa(serverPID))
	if err != nil {
		return nil, err
	}
	return parsePIDs("mps client list", out)
}

func parsePIDs(what, out string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: unexpected %q", what, out)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// SetDefaultActiveThreadPercentage caps the SM share of clients that do not set their own.
func (c *Control) SetDefaultActiveThreadPercentage(ctx context.Context, pct int) error {
	if pct < 1 || pct > 100 {
		return fmt.Errorf("thread percentage %d is outside 1..100", pct)
	}
	_, err := c.Send(ctx, "set_default_active_thread_percentage "+strconv.Itoa(pct))
	return err
}

// SetDefaultDevicePinnedMemLimit caps device memory per client, e.g. "10G".
func (c *Control) SetDefaultDevicePinnedMemLimit(ctx context.Context, gpu int, limit string) error {
	if limit == "" || strings.ContainsAny(limit, " \n") {
		return fmt.Errorf("bad memory limit %q", limit)
	}
	_, err := c.Send(ctx, fmt.Sprintf("set_default_device_pinned_mem_limit %d %s", gpu, limit))
	return err
}

// Quit stops the daemon (and, once their clients exit, its servers).
func (c *Control) Quit(ctx context.Context) error {
	_, err := c.Send(ctx, "quit")
	return err
}

// Server states as get_server_status prints them. A server in FAULT has
// seen a fatal GPU exception in one of its clients; it takes no new work
// until every client of the faulted device has exited.
const (
	StateActive = "ACTIVE"
	StateFault  = "FAULT"
)

// ServerStatus is one MPS server and the clients on each of its devices.
type ServerStatus struct {
	PID     int
	State   string // StateActive, StateFault, or what the daemon printed
	Devices []DeviceClients
}

// DeviceClients are the client processes of one device of a server.
type DeviceClients struct {
	Device  int    // device index as the server sees it (the host's index)
	Desc    string // bus id and name, e.g. "00:01.0, NVIDIA H200"
	Clients []int  // client PIDs
}

// Status is what the control daemon says of its servers.
type Status struct {
	Servers []ServerStatus
}

// Faulted returns the servers in FAULT.
func (s Status) Faulted() []ServerStatus {
	var out []ServerStatus
	for _, sv := range s.Servers {
		if sv.State == StateFault {
			out = append(out, sv)
		}
	}
	return out
}

// Clients returns the client PIDs on each device, across servers.
func (s Status) Clients() map[int][]int {
	out := map[int][]int{}
	for _, sv := range s.Servers {
		for _, d := range sv.Devices {
			out[d.Device] = append(out[d.Device], d.Clients...)
		}
	}
	return out
}

// ServerState returns the state get_server_status prints for one server.
func (c *Control) ServerState(ctx context.Context, serverPID int) (string, error) {
	out, err := c.Send(ctx, "get_server_status "+strconv.Itoa(serverPID))
	if err != nil {
		return "", err
	}
	if out == "" {
		return "", fmt.Errorf("mps server %d: empty status", serverPID)
	}
	return out, nil
}

// DeviceClientList returns the clients of one server by device
// (get_device_client_list).
func (c *Control) DeviceClientList(ctx context.Context, serverPID int) ([]DeviceClients, error) {
	out, err := c.Send(ctx, "get_device_client_list "+strconv.Itoa(serverPID))
	if err != nil {
		return nil, err
	}
	return parseDeviceClients(out)
}

// parseDeviceClients reads get_device_client_list: a header per device,
// "[1] 00:01.0, NVIDIA H200", then one "PID.CONTEXT" line per client
// context.
func parseDeviceClients(out string) ([]DeviceClients, error) {
	var devs []DeviceClients
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "["); ok {
			idx, desc, ok := strings.Cut(rest, "]")
			dev, err := strconv.Atoi(idx)
			if !ok || err != nil {
				return nil, fmt.Errorf("mps device client list: unexpected %q", line)
			}
			devs = append(devs, DeviceClients{Device: dev, Desc: strings.TrimSpace(desc)})
			continue
		}
		pidStr, _, _ := strings.Cut(line, ".")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || len(devs) == 0 {
			return nil, fmt.Errorf("mps device client list: unexpected %q", line)
		}
		d := &devs[len(devs)-1]
		if !slices.Contains(d.Clients, pid) {
			d.Clients = append(d.Clients, pid)
		}
	}
	slices.SortFunc(devs, func(a, b DeviceClients) int { return a.Device - b.Device })
	return devs, nil
}

// Status asks the daemon for every server, its state and its clients by
// device. An error means the daemon did not answer (it is not running, or
// the pipe directory is not the daemon's).
func (c *Control) Status(ctx context.Context) (Status, error) {
	pids, err := c.ServerList(ctx)
	if err != nil {
		return Status{}, err
	}
	var st Status
	for _, pid := range pids {
		state, err := c.ServerState(ctx, pid)
		if err != nil {
			return Status{}, err
		}
		devs, err := c.DeviceClientList(ctx, pid)
		if err != nil {
			return Status{}, err
		}
		st.Servers = append(st.Servers, ServerStatus{PID: pid, State: state, Devices: devs})
	}
	return st, nil
}

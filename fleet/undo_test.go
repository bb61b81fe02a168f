package fleet

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/fleetscribe/fleetscribe/lab/kit/syncbuf"
)

// refreshingGroup answers the Auto Scaling Query API (the SDK's own
// requests and XML) for one group, with instance refreshes as AWS runs
// them: one instance replaced per look, a cancel that lasts while
// instances finish their boots and drains, a second refresh refused while
// one is active. The local AWS servers have no instance refreshes.
type refreshingGroup struct {
	mu          sync.Mutex
	name        string
	mixed       bool     // a mixed instances policy (the fleet), or a launch template (a warm pool)
	version     string   // the group's launch template version
	overrides   []string // instance types of the mixed policy
	instances   []string // each instance's version
	refreshes   []*fakeRefresh
	cancelLooks int // looks a cancel takes to finish
	failLooks   int // a refresh fails after this many looks (0: never)
	calls       []string
	problems    []string // requests AWS would refuse or that lose settings
}

type fakeRefresh struct {
	id, status, reason, target string
	desired                    bool
	left, looks                int
	alarms                     int
	autoRollback, minHealthy   string
}

func (f *refreshingGroup) active() *fakeRefresh {
	for _, r := range f.refreshes {
		switch r.status {
		case "Pending", "InProgress", "Cancelling":
			return r
		}
	}
	return nil
}

// look advances the active refresh by one step, as time passing would.
func (f *refreshingGroup) look() {
	r := f.active()
	if r == nil {
		return
	}
	r.looks++
	switch r.status {
	case "Pending":
		r.status = "InProgress"
	case "Cancelling":
		if r.left--; r.left <= 0 {
			r.status = "Cancelled"
		}
	case "InProgress":
		if f.failLooks > 0 && r.looks >= f.failLooks {
			r.status, r.reason = "Failed", "instances failed to launch"
			return
		}
		for i, v := range f.instances {
			if v != r.target {
				f.instances[i] = r.target
				return
			}
		}
		r.status = "Successful"
		if r.desired {
			f.version = r.target
		}
	}
}

func (f *refreshingGroup) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	action := req.Form.Get("Action")
	f.calls = append(f.calls, action)
	switch action {
	case "DescribeAutoScalingGroups":
		if req.Form.Get("AutoScalingGroupNames.member.1") != f.name {
			f.reply(w, action, "<AutoScalingGroups/>")
			return
		}
		f.reply(w, action, "<AutoScalingGroups><member>"+f.groupXML()+"</member></AutoScalingGroups>")
	case "UpdateAutoScalingGroup":
		if f.mixed {
			p := "MixedInstancesPolicy.LaunchTemplate."
			f.version = req.Form.Get(p + "LaunchTemplateSpecification.Version")
			if n := countMembers(req, p+"Overrides.member.%d.InstanceType"); n != len(f.overrides) {
				f.problems = append(f.problems, fmt.Sprintf("update sent %d of the policy's %d overrides", n, len(f.overrides)))
			}
		} else {
			f.version = req.Form.Get("LaunchTemplate.Version")
		}
		f.reply(w, action, "")
	case "DescribeInstanceRefreshes":
		f.look()
		var b strings.Builder
		for _, r := range f.refreshes {
			if id := req.Form.Get("InstanceRefreshIds.member.1"); id != "" && id != r.id {
				continue
			}
			left := 0
			for _, v := range f.instances {
				if v != r.target {
					left++
				}
			}
			fmt.Fprintf(&b, "<member><InstanceRefreshId>%s</InstanceRefreshId><AutoScalingGroupName>%s</AutoScalingGroupName><Status>%s</Status><StatusReason>%s</StatusReason><PercentageComplete>%d</PercentageComplete><InstancesToUpdate>%d</InstancesToUpdate>",
				r.id, f.name, r.status, r.reason, 100*(len(f.instances)-left)/max(len(f.instances), 1), left)
			if r.desired {
				b.WriteString("<DesiredConfiguration>" + f.templateXML(r.target) + "</DesiredConfiguration>")
			}
			b.WriteString("</member>")
		}
		f.reply(w, action, "<InstanceRefreshes>"+b.String()+"</InstanceRefreshes>")
	case "CancelInstanceRefresh":
		r := f.active()
		if r == nil || r.status == "Cancelling" {
			f.fault(w, "ActiveInstanceRefreshNotFound", "No in progress or pending Instance Refresh found")
			return
		}
		r.status, r.left = "Cancelling", f.cancelLooks
		f.reply(w, action, "<InstanceRefreshId>"+r.id+"</InstanceRefreshId>")
	case "StartInstanceRefresh":
		if f.active() != nil {
			f.problems = append(f.problems, "a refresh was started while another was active")
			f.fault(w, "InstanceRefreshInProgress", "An Instance Refresh is already in progress")
			return
		}
		r := &fakeRefresh{id: fmt.Sprintf("r-%d", len(f.refreshes)+1), status: "Pending", target: f.version,
			alarms: countMembers(req, "Preferences.AlarmSpecification.Alarms.member.%d"), autoRollback: req.Form.Get("Preferences.AutoRollback"),
			minHealthy: req.Form.Get("Preferences.MinHealthyPercentage")}
		key := "DesiredConfiguration.LaunchTemplate.Version"
		if f.mixed {
			key = "DesiredConfiguration.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification.Version"
		}
		if v := req.Form.Get(key); v != "" {
			r.target, r.desired = v, true
		}
		f.refreshes = append([]*fakeRefresh{r}, f.refreshes...)
		f.reply(w, action, "<InstanceRefreshId>"+r.id+"</InstanceRefreshId>")
	default:
		f.fault(w, "InvalidAction", action)
	}
}

func countMembers(req *http.Request, pattern string) int {
	n := 0
	for req.Form.Get(fmt.Sprintf(pattern, n+1)) != "" {
		n++
	}
	return n
}

func (f *refreshingGroup) templateXML(version string) string {
	spec := "<LaunchTemplateId>lt-0abc</LaunchTemplateId><LaunchTemplateName>" + f.name + "</LaunchTemplateName><Version>" + version + "</Version>"
	if !f.mixed {
		return "<LaunchTemplate>" + spec + "</LaunchTemplate>"
	}
	var o strings.Builder
	for i, t := range f.overrides {
		fmt.Fprintf(&o, "<member><InstanceType>%s</InstanceType><WeightedCapacity>%d</WeightedCapacity></member>", t, 1<<(2*i))
	}
	return "<MixedInstancesPolicy><LaunchTemplate><LaunchTemplateSpecification>" + spec + "</LaunchTemplateSpecification><Overrides>" + o.String() + "</Overrides></LaunchTemplate></MixedInstancesPolicy>"
}

func (f *refreshingGroup) groupXML() string {
	var in strings.Builder
	for i, v := range f.instances {
		fmt.Fprintf(&in, "<member><InstanceId>i-%04d</InstanceId><LifecycleState>InService</LifecycleState><HealthStatus>Healthy</HealthStatus><LaunchTemplate><LaunchTemplateId>lt-0abc</LaunchTemplateId><Version>%s</Version></LaunchTemplate></member>", i, v)
	}
	return "<AutoScalingGroupName>" + f.name + "</AutoScalingGroupName>" + f.templateXML(f.version) +
		fmt.Sprintf("<MinSize>0</MinSize><MaxSize>16</MaxSize><DesiredCapacity>%d</DesiredCapacity>", len(f.instances)) +
		"<Instances>" + in.String() + "</Instances>"
}

func (f *refreshingGroup) reply(w http.ResponseWriter, action, result string) {
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><%sResult>%s</%sResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></%sResponse>`,
		action, action, result, action, action)
}

func (f *refreshingGroup) fault(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusBadRequest)
	var m strings.Builder
	_ = xml.EscapeText(&m, []byte(msg))
	fmt.Fprintf(w, `<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>1</RequestId></ErrorResponse>`, code, m.String())
}

func (f *refreshingGroup) state() (version string, instances []string, calls []string, problems []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version, append([]string(nil), f.instances...), append([]string(nil), f.calls...), append([]string(nil), f.problems...)
}

func (f *refreshingGroup) count(action string) int {
	_, _, calls, _ := f.state()
	n := 0
	for _, c := range calls {
		if c == action {
			n++
		}
	}
	return n
}

func undoAgainst(t *testing.T, f *refreshingGroup, version int64) (*Undo, *syncbuf.Buffer) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	api := autoscaling.New(autoscaling.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.AnonymousCredentials{},
	})
	out := &syncbuf.Buffer{}
	return &Undo{API: api, Group: f.name, Version: version, Poll: time.Millisecond, Out: out}, out
}

func allOn(instances []string, v string) bool {
	for _, x := range instances {
		if x != v {
			return false
		}
	}
	return len(instances) > 0
}

// A promoted bad version half rolled out (the provider's refresh, no
// desired configuration): the undo cancels it and waits however long the
// cancel takes (60 looks: half an hour at the 30-s poll, twice the
// provider's 15 minutes), puts the group back on the good version with the
// mixed policy's overrides kept, and replaces the bad instances with a
// refresh no alarm stops and that does not roll back.
func TestUndoCancelsWaitsAndReplaces(t *testing.T) {
	f := &refreshingGroup{name: "fleetscribe-prod", mixed: true, version: "4", overrides: []string{"g6e.xlarge", "g6e.12xlarge"},
		instances: []string{"4", "4", "3", "3", "3"}, cancelLooks: 60,
		refreshes: []*fakeRefresh{{id: "r-provider", status: "InProgress", target: "4"}}}
	u, out := undoAgainst(t, f, 3)
	if err := u.Run(context.Background()); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	version, instances, calls, problems := f.state()
	if version != "3" || !allOn(instances, "3") {
		t.Errorf("group on %s, instances %v: want all on 3", version, instances)
	}
	if len(problems) > 0 {
		t.Errorf("requests AWS would refuse or that lose settings: %v", problems)
	}
	order := []string{"CancelInstanceRefresh", "UpdateAutoScalingGroup", "StartInstanceRefresh"}
	at := 0
	for _, c := range calls {
		if at < len(order) && c == order[at] {
			at++
		}
	}
	if at != len(order) {
		t.Errorf("calls %v: want %v in that order", calls, order)
	}
	undo := f.refreshes[0]
	if undo.alarms != 0 || undo.autoRollback != "false" || undo.minHealthy != "100" || !undo.desired {
		t.Errorf("undo's refresh: %d alarms, auto rollback %q, min healthy %q, desired configuration %v; want none, false, 100, true",
			undo.alarms, undo.autoRollback, undo.minHealthy, undo.desired)
	}
	if !strings.Contains(out.String(), "launch_template_version = 3") {
		t.Errorf("output does not say what to set in Terraform:\n%s", out)
	}
}

// The apply that timed out: the group is already on the good version (the
// provider switched it before its cancel wait failed), no refresh runs,
// and bad instances still serve; a re-apply would start nothing.
func TestUndoReplacesWhatAFailedApplyLeft(t *testing.T) {
	f := &refreshingGroup{name: "fleetscribe-prod", mixed: true, version: "3", overrides: []string{"g6e.xlarge"},
		instances: []string{"4", "3", "4"},
		refreshes: []*fakeRefresh{{id: "r-provider", status: "Cancelled", target: "4"}}}
	u, out := undoAgainst(t, f, 3)
	if err := u.Run(context.Background()); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	_, instances, _, problems := f.state()
	if !allOn(instances, "3") || len(problems) > 0 {
		t.Errorf("instances %v, problems %v", instances, problems)
	}
	if f.count("CancelInstanceRefresh") != 0 || f.count("UpdateAutoScalingGroup") != 0 {
		t.Errorf("calls %v: nothing to cancel or set", f.calls)
	}
}

// Run again after an interruption, the undo waits for its own refresh
// rather than cancelling it; with nothing left, it changes nothing.
func TestUndoRunsAgainFromWhereTheGroupIs(t *testing.T) {
	f := &refreshingGroup{name: "fleetscribe-prod", version: "3", instances: []string{"4", "4", "3"},
		refreshes: []*fakeRefresh{{id: "r-undo", status: "InProgress", target: "3", desired: true}}}
	u, out := undoAgainst(t, f, 3)
	if err := u.Run(context.Background()); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	if f.count("CancelInstanceRefresh") != 0 || f.count("StartInstanceRefresh") != 0 {
		t.Errorf("calls %v: its own refresh was cancelled or started again", f.calls)
	}
	if _, instances, _, _ := f.state(); !allOn(instances, "3") {
		t.Errorf("instances %v", instances)
	}
	if err := u.Run(context.Background()); err != nil {
		t.Fatalf("undo again: %v", err)
	}
	if f.count("StartInstanceRefresh") != 0 || f.count("UpdateAutoScalingGroup") != 0 {
		t.Errorf("calls %v: an undo with nothing to do changed something", f.calls)
	}
}

// A launch-template group (the warm pool's) is set through LaunchTemplate.
func TestUndoLaunchTemplateGroup(t *testing.T) {
	f := &refreshingGroup{name: "fleetscribe-warm", version: "7", instances: []string{"7", "6"}, cancelLooks: 3,
		refreshes: []*fakeRefresh{{id: "r-provider", status: "InProgress", target: "7"}}}
	u, out := undoAgainst(t, f, 6)
	if err := u.Run(context.Background()); err != nil {
		t.Fatalf("undo: %v\n%s", err, out)
	}
	if version, instances, _, problems := f.state(); version != "6" || !allOn(instances, "6") || len(problems) > 0 {
		t.Errorf("group on %s, instances %v, problems %v", version, instances, problems)
	}
}

func TestUndoFailures(t *testing.T) {
	t.Run("refresh fails", func(t *testing.T) {
		f := &refreshingGroup{name: "g", mixed: true, version: "4", overrides: []string{"g6e.xlarge"}, instances: []string{"4", "4"}, failLooks: 2}
		u, _ := undoAgainst(t, f, 3)
		err := u.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "Failed") || !strings.Contains(err.Error(), "instances failed to launch") || !strings.Contains(err.Error(), "run this again") {
			t.Errorf("err = %v: want the refresh's status, its reason and what to do", err)
		}
	})
	t.Run("deadline while cancelling", func(t *testing.T) {
		f := &refreshingGroup{name: "g", mixed: true, version: "4", overrides: []string{"g6e.xlarge"}, instances: []string{"3", "3", "3"}, cancelLooks: 1 << 30,
			refreshes: []*fakeRefresh{{id: "r-provider", status: "InProgress", target: "4"}}}
		u, _ := undoAgainst(t, f, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := u.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "Cancelling") || !strings.Contains(err.Error(), "run this again") {
			t.Errorf("err = %v", err)
		}
		if f.count("UpdateAutoScalingGroup") != 0 {
			t.Error("the group was changed while the refresh it cancelled was still running")
		}
	})
	t.Run("no such group", func(t *testing.T) {
		u, _ := undoAgainst(t, &refreshingGroup{name: "g"}, 3)
		u.Group = "fleetscribe-typo"
		if err := u.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `"fleetscribe-typo"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("version zero", func(t *testing.T) {
		u, _ := undoAgainst(t, &refreshingGroup{name: "g"}, 0)
		if err := u.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "1 or more") {
			t.Errorf("err = %v", err)
		}
	})
}

package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// UndoAPI is the Auto Scaling calls an undo makes.
type UndoAPI interface {
	DescribeAutoScalingGroups(ctx context.Context, params *autoscaling.DescribeAutoScalingGroupsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	DescribeInstanceRefreshes(ctx context.Context, params *autoscaling.DescribeInstanceRefreshesInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error)
	CancelInstanceRefresh(ctx context.Context, params *autoscaling.CancelInstanceRefreshInput, optFns ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error)
	UpdateAutoScalingGroup(ctx context.Context, params *autoscaling.UpdateAutoScalingGroupInput, optFns ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error)
	StartInstanceRefresh(ctx context.Context, params *autoscaling.StartInstanceRefreshInput, optFns ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error)
}

// Undo puts an Auto Scaling group back on a launch template version it ran
// before, outside Terraform and without its limits: it cancels the refresh
// in progress and waits for the cancel to finish however long the
// instances in the middle of a boot or a drain take (the provider gives up
// after 15 minutes, where a boot may take 45 and a drain 31), sets the
// group's launch template version (so every launch from then on boots the
// good one), and replaces every instance on another version with an
// instance refresh that launches before it terminates and that no alarm
// stops (the bad version's alarms are firing). It waits for that refresh
// too, printing progress to Out. Run it again after any interruption: it
// continues from where the group is (its own refresh, which carries the
// version as its desired configuration, is waited for, not cancelled).
type Undo struct {
	API     UndoAPI
	Group   string
	Version int64         // the launch template version to go back to
	Warmup  time.Duration // the refresh's instance warm-up (0: 300 s, the fleet module's default)
	Poll    time.Duration // how often progress is read (0: 30 s)
	Out     io.Writer
	Now     func() time.Time // nil: time.Now
}

// Refresh statuses an undo waits on; every other status is over.
var refreshActive = map[types.InstanceRefreshStatus]bool{
	types.InstanceRefreshStatusPending:            true,
	types.InstanceRefreshStatusInProgress:         true,
	types.InstanceRefreshStatusCancelling:         true,
	types.InstanceRefreshStatusRollbackInProgress: true,
	types.InstanceRefreshStatusBaking:             true,
}

func (u *Undo) now() time.Time {
	if u.Now != nil {
		return u.Now()
	}
	return time.Now()
}

func (u *Undo) say(format string, args ...any) {
	if u.Out != nil {
		fmt.Fprintf(u.Out, "%s  "+format+"\n", append([]any{u.now().UTC().Format("15:04:05")}, args...)...)
	}
}

// Run undoes, and returns once every instance of the group runs Version
// (nil), or with what stopped it; ctx bounds the whole undo.
func (u *Undo) Run(ctx context.Context) error {
	if u.Version < 1 {
		return fmt.Errorf("version %d: a launch template version is a number, 1 or more", u.Version)
	}
	g, err := u.group(ctx)
	if err != nil {
		return err
	}
	lt, err := templateOf(g)
	if err != nil {
		return err
	}
	want := strconv.FormatInt(u.Version, 10)
	u.say("%s: launch template %s at version %s; instances by version: %s", u.Group, templateName(lt), aws.ToString(lt.Version), versionsOf(g))

	// 1. The refresh in progress: cancel it (unless it is this undo's own,
	// from an earlier run) and wait for it to end.
	active, err := u.activeRefresh(ctx)
	if err != nil {
		return err
	}
	if active != nil && !refreshGoesTo(active, want) {
		if err := u.stop(ctx, active); err != nil {
			return err
		}
		active = nil
	}

	// 2. The group's own version: every launch from now on boots it.
	if aws.ToString(lt.Version) != want {
		if err := u.setVersion(ctx, g, want); err != nil {
			return err
		}
		u.say("%s: launch template version set to %s (every launch from now boots it)", u.Group, want)
		if g, err = u.group(ctx); err != nil {
			return err
		}
	}

	// 3. Instances on any other version: replace them.
	if active == nil {
		others := 0
		for _, in := range g.Instances {
			if instanceVersion(in) != want {
				others++
			}
		}
		if others == 0 {
			u.say("%s: every instance runs version %s; nothing to replace", u.Group, want)
			u.sayTerraform()
			return nil
		}
		if active, err = u.start(ctx, g, want); err != nil {
			return err
		}
		u.say("%s: instance refresh %s started: %d instance(s) to replace, launching before terminating", u.Group, aws.ToString(active.InstanceRefreshId), others)
	}
	r, err := u.wait(ctx, active)
	if err != nil {
		return err
	}
	if r.Status != types.InstanceRefreshStatusSuccessful {
		return fmt.Errorf("the undo's instance refresh %s ended %s (%s): the group launches version %s, but instances on other versions remain; see the group's activity history, then run this again",
			aws.ToString(r.InstanceRefreshId), r.Status, aws.ToString(r.StatusReason), want)
	}
	u.say("%s: instance refresh %s successful: every instance runs version %s", u.Group, aws.ToString(r.InstanceRefreshId), want)
	u.sayTerraform()
	return nil
}

func (u *Undo) sayTerraform() {
	u.say("next: set launch_template_version = %d in Terraform (remove canary if it is set) and apply; the plan changes nothing on the group's version and starts no refresh", u.Version)
}

func (u *Undo) group(ctx context.Context) (types.AutoScalingGroup, error) {
	out, err := u.API.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{u.Group}})
	if err != nil {
		return types.AutoScalingGroup{}, fmt.Errorf("describe group %s: %w", u.Group, err)
	}
	if len(out.AutoScalingGroups) == 0 {
		return types.AutoScalingGroup{}, fmt.Errorf("no Auto Scaling group %q in this account and region (the fleet's is its name variable; a canary's is NAME-canary)", u.Group)
	}
	return out.AutoScalingGroups[0], nil
}

// templateOf is the launch template the group launches from, directly or
// through its mixed instances policy.
func templateOf(g types.AutoScalingGroup) (*types.LaunchTemplateSpecification, error) {
	switch {
	case g.LaunchTemplate != nil:
		return g.LaunchTemplate, nil
	case g.MixedInstancesPolicy != nil && g.MixedInstancesPolicy.LaunchTemplate != nil && g.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification != nil:
		return g.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification, nil
	}
	return nil, fmt.Errorf("group %s launches from no launch template (a launch configuration?): undo works on launch template versions", aws.ToString(g.AutoScalingGroupName))
}

func templateName(lt *types.LaunchTemplateSpecification) string {
	if n := aws.ToString(lt.LaunchTemplateName); n != "" {
		return n
	}
	return aws.ToString(lt.LaunchTemplateId)
}

func instanceVersion(in types.Instance) string {
	if in.LaunchTemplate == nil {
		return "none"
	}
	return aws.ToString(in.LaunchTemplate.Version)
}

func versionsOf(g types.AutoScalingGroup) string {
	n := map[string]int{}
	for _, in := range g.Instances {
		n[instanceVersion(in)]++
	}
	if len(n) == 0 {
		return "none running"
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, n[k])
	}
	return strings.Join(parts, " ")
}

func (u *Undo) activeRefresh(ctx context.Context) (*types.InstanceRefresh, error) {
	out, err := u.API.DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String(u.Group)})
	if err != nil {
		return nil, fmt.Errorf("describe instance refreshes of %s: %w", u.Group, err)
	}
	for i := range out.InstanceRefreshes {
		if r := out.InstanceRefreshes[i]; refreshActive[r.Status] {
			return &r, nil
		}
	}
	return nil, nil
}

// refreshGoesTo says whether r replaces instances with version: an undo's
// refresh names it as its desired configuration.
func refreshGoesTo(r *types.InstanceRefresh, version string) bool {
	d := r.DesiredConfiguration
	if d == nil {
		return false
	}
	if d.LaunchTemplate != nil {
		return aws.ToString(d.LaunchTemplate.Version) == version
	}
	if m := d.MixedInstancesPolicy; m != nil && m.LaunchTemplate != nil && m.LaunchTemplate.LaunchTemplateSpecification != nil {
		return aws.ToString(m.LaunchTemplate.LaunchTemplateSpecification.Version) == version
	}
	return false
}

// stop cancels r (a rollback in progress cannot be cancelled: it is
// waited for) and waits until it has ended.
func (u *Undo) stop(ctx context.Context, r *types.InstanceRefresh) error {
	if r.Status != types.InstanceRefreshStatusCancelling && r.Status != types.InstanceRefreshStatusRollbackInProgress {
		_, err := u.API.CancelInstanceRefresh(ctx, &autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: aws.String(u.Group)})
		var none *types.ActiveInstanceRefreshNotFoundFault
		switch {
		case errors.As(err, &none):
			u.say("%s: instance refresh %s ended before it could be cancelled", u.Group, aws.ToString(r.InstanceRefreshId))
			return nil
		case err != nil:
			return fmt.Errorf("cancel instance refresh %s of %s: %w", aws.ToString(r.InstanceRefreshId), u.Group, err)
		}
		u.say("%s: cancelling instance refresh %s (%s); instances in the middle of a boot or a drain finish it first", u.Group, aws.ToString(r.InstanceRefreshId), r.Status)
	} else {
		u.say("%s: waiting for instance refresh %s (%s) to end", u.Group, aws.ToString(r.InstanceRefreshId), r.Status)
	}
	done, err := u.wait(ctx, r)
	if err != nil {
		return err
	}
	u.say("%s: instance refresh %s ended %s", u.Group, aws.ToString(done.InstanceRefreshId), done.Status)
	return nil
}

// wait polls r until it is over, printing progress whenever it changes.
func (u *Undo) wait(ctx context.Context, r *types.InstanceRefresh) (*types.InstanceRefresh, error) {
	poll := u.Poll
	if poll <= 0 {
		poll = 30 * time.Second
	}
	id := aws.ToString(r.InstanceRefreshId)
	start, last := u.now(), ""
	status := r.Status
	stopped := func() error {
		return fmt.Errorf("stopped waiting for instance refresh %s of %s (%s): %w; run this again to go on from where the group is", id, u.Group, status, context.Cause(ctx))
	}
	for {
		out, err := u.API.DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{
			AutoScalingGroupName: aws.String(u.Group), InstanceRefreshIds: []string{id},
		})
		if err != nil && ctx.Err() != nil {
			return nil, stopped()
		}
		if err != nil {
			return nil, fmt.Errorf("describe instance refresh %s of %s: %w", id, u.Group, err)
		}
		if len(out.InstanceRefreshes) == 0 {
			return nil, fmt.Errorf("instance refresh %s of %s is gone from its history", id, u.Group)
		}
		cur := &out.InstanceRefreshes[0]
		status = cur.Status
		if !refreshActive[cur.Status] {
			return cur, nil
		}
		line := fmt.Sprintf("%s, %d%% done, %d instance(s) to update", cur.Status, aws.ToInt32(cur.PercentageComplete), aws.ToInt32(cur.InstancesToUpdate))
		if line != last {
			u.say("%s: refresh %s %s (%s so far)", u.Group, id, line, u.now().Sub(start).Round(time.Second))
			last = line
		}
		select {
		case <-ctx.Done():
			return nil, stopped()
		case <-time.After(poll):
		}
	}
}

// mixedWith is the group's mixed instances policy with version, whole (its
// overrides and distribution kept).
func mixedWith(m *types.MixedInstancesPolicy, version string) *types.MixedInstancesPolicy {
	spec := *m.LaunchTemplate.LaunchTemplateSpecification
	spec.Version = aws.String(version)
	tmpl := *m.LaunchTemplate
	tmpl.LaunchTemplateSpecification = &spec
	out := *m
	out.LaunchTemplate = &tmpl
	return &out
}

func templateWith(lt *types.LaunchTemplateSpecification, version string) *types.LaunchTemplateSpecification {
	spec := types.LaunchTemplateSpecification{LaunchTemplateId: lt.LaunchTemplateId, Version: aws.String(version)}
	if spec.LaunchTemplateId == nil {
		spec.LaunchTemplateName = lt.LaunchTemplateName
	}
	return &spec
}

func (u *Undo) setVersion(ctx context.Context, g types.AutoScalingGroup, version string) error {
	in := &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String(u.Group)}
	if g.LaunchTemplate != nil {
		in.LaunchTemplate = templateWith(g.LaunchTemplate, version)
	} else {
		in.MixedInstancesPolicy = mixedWith(g.MixedInstancesPolicy, version)
	}
	if _, err := u.API.UpdateAutoScalingGroup(ctx, in); err != nil {
		return fmt.Errorf("set %s's launch template version to %s: %w (does the version exist?)", u.Group, version, err)
	}
	return nil
}

func (u *Undo) start(ctx context.Context, g types.AutoScalingGroup, version string) (*types.InstanceRefresh, error) {
	warmup := u.Warmup
	if warmup <= 0 {
		warmup = 300 * time.Second
	}
	desired := &types.DesiredConfiguration{}
	if g.LaunchTemplate != nil {
		desired.LaunchTemplate = templateWith(g.LaunchTemplate, version)
	} else {
		desired.MixedInstancesPolicy = mixedWith(g.MixedInstancesPolicy, version)
	}
	out, err := u.API.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{
		AutoScalingGroupName: aws.String(u.Group),
		Strategy:             types.RefreshStrategyRolling,
		DesiredConfiguration: desired,
		Preferences: &types.RefreshPreferences{
			MinHealthyPercentage:      aws.Int32(100),
			MaxHealthyPercentage:      aws.Int32(200),
			SkipMatching:              aws.Bool(true),
			InstanceWarmup:            aws.Int32(int32(warmup / time.Second)),
			ScaleInProtectedInstances: types.ScaleInProtectedInstancesRefresh,
			StandbyInstances:          types.StandbyInstancesTerminate,
			AutoRollback:              aws.Bool(false),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start the undo's instance refresh of %s: %w", u.Group, err)
	}
	return &types.InstanceRefresh{InstanceRefreshId: out.InstanceRefreshId, Status: types.InstanceRefreshStatusPending, DesiredConfiguration: desired}, nil
}

# Plans the fleet module alone with the real AWS provider (offline: fake
# credentials, no account lookups; the one data source that would call AWS
# is overridden), so every attribute asserted here is the provider's own
# plan of it. Run by `make tf-validate`.

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  default_tags {
    tags = { team = "asr", cost-centre = "speech" }
  }
}

override_data {
  target = data.aws_ssm_parameter.ami[0]
  values = { insecure_value = "ami-0123456789abcdef0" }
}

override_data {
  target = data.aws_ami.root
  values = { root_device_name = "/dev/sda1" }
}

variables {
  name                   = "fs-fleet"
  subnet_ids             = ["subnet-0123456789abcdef0"]
  security_group_ids     = ["sg-0123456789abcdef0"]
  instance_profile_name  = "fs-fleet-worker"
  max_gpus               = 4
  queue_names            = ["fs-live", "fs-bulk"]
  backlog_per_gpu_target = 600
  worker_environment = {
    FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
    FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
    FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
    WORKER_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:1"
    TRITON_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/tritonserver:24.10-py3"
    CUDA_IMAGE                = "000000000000.dkr.ecr.us-east-1.amazonaws.com/cuda:12.4.1-base-ubuntu22.04"
    MODEL_S3_URI              = "s3://fs-models/asr/"
  }
}

# F21: the model is synced where the Triton services mount it, whether or
# not the caller names the place (compose's own default is nothing on an
# instance), and a fleet with no model at all is refused at plan.
run "model_synced_where_triton_mounts_it" {
  command = plan
  assert {
    condition     = strcontains(output.user_data, "\nMODEL_REPOSITORY=/opt/fleetscribe/models\n") && strcontains(output.user_data, "aws s3 sync --only-show-errors --delete \"$model_uri\" \"$repo\"")
    error_message = "MODEL_S3_URI without MODEL_REPOSITORY is synced somewhere the Triton services do not mount"
  }
}

run "no_model_refused" {
  command = plan
  variables {
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
      WORKER_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:1"
      TRITON_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/tritonserver:24.10-py3"
      CUDA_IMAGE                = "000000000000.dkr.ecr.us-east-1.amazonaws.com/cuda:12.4.1-base-ubuntu22.04"
    }
  }
  expect_failures = [aws_launch_template.this]
}

# Item 2: the worker protects its busy instance from scale-in, and its
# drain is as long as its longest job.
run "defaults" {
  command = plan
  assert {
    condition = alltrue([for s in ["FLEETSCRIBE_SCALE_IN_PROTECTION=false", "FLEETSCRIBE_ASG_NAME=fs-fleet", "FLEETSCRIBE_JOB_TIMEOUT=1800s",
    "FLEETSCRIBE_DRAIN_TIMEOUT=1800s", "docker compose stop -t 1860"] : strcontains(output.user_data, s)])
    error_message = "user data: scale-in protection, job timeout or drain missing"
  }
  # Item 6: with capacity rebalancing the group replaces the instance
  # through the drain; the worker must not stop at the recommendation.
  assert {
    condition     = strcontains(output.user_data, "\nFLEETSCRIBE_DRAIN_ON_REBALANCE=false\n")
    error_message = "the worker would stop on a rebalance recommendation while its GPUs still count"
  }
  # Item 6: jobs per instance follow its GPUs (worker mps up multiplies).
  assert {
    condition     = strcontains(output.user_data, "-per-gpu 8 -jobs-per-gpu 16 ")
    error_message = "the instance's jobs are not derived from its GPUs"
  }
  # The drain's hook outlasts the worker's drain and the stack's stop (a
  # shorter one ends a drain mid-job), and systemd waits for compose; the
  # boot is cut at its timeout and heartbeats its hook every minute, well
  # inside the hook's 300 s.
  assert {
    condition = (aws_autoscaling_lifecycle_hook.drain["fleet"].heartbeat_timeout == 1800 + 180 && aws_autoscaling_lifecycle_hook.launch["fleet"].heartbeat_timeout == 300
    && alltrue([for s in ["TimeoutStopSec=1890", "timeout --kill-after=30 2700 fleetscribe-stack", "while sleep 60; do hook record-lifecycle-action-heartbeat"] : strcontains(output.user_data, s)]))
    error_message = "the drain hook, the stack's stop, the boot timeout or the boot's heartbeat does not follow the settings"
  }
  # EC2 gets the script compressed, as user_data_bytes counts it.
  assert {
    condition     = aws_launch_template.this.user_data == base64gzip(output.user_data)
    error_message = "the launch template does not carry the user data gzipped"
  }
}

# Item 3: a refresh launches before it terminates (a one-instance fleet is
# never at zero), skips instances already on the new template, replaces
# busy (protected) instances through the drain, and stops on the fleet's own
# alarms without an auto rollback (which, the provider setting the group's
# version first, would restore the new version: fleetctl undo restores).
run "refresh_launches_before_terminating" {
  command = plan
  assert {
    condition     = aws_autoscaling_group.this.instance_refresh[0].preferences[0].min_healthy_percentage == 100 && aws_autoscaling_group.this.instance_refresh[0].preferences[0].max_healthy_percentage == 200
    error_message = "the refresh terminates before it launches (min_healthy_percentage below 100)"
  }
  assert {
    condition     = aws_autoscaling_group.this.instance_refresh[0].preferences[0].skip_matching && !aws_autoscaling_group.this.instance_refresh[0].preferences[0].auto_rollback
    error_message = "the refresh replaces instances already on the template, or rolls back to the version the provider already set on the group"
  }
  assert {
    condition     = aws_autoscaling_group.this.instance_refresh[0].preferences[0].scale_in_protected_instances == "Refresh"
    error_message = "protected (busy) instances would block or be skipped by the refresh"
  }
  assert {
    condition     = toset(aws_autoscaling_group.this.instance_refresh[0].preferences[0].alarm_specification[0].alarms) == toset(["fs-fleet-boot-failures", "fs-fleet-launch-shortfall", "fs-fleet-never-in-service"])
    error_message = "the refresh does not stop on failed boots and launches"
  }
}

# Item 4: the launch hook's deadline is its own (heartbeated), not the
# scaling warm-up; gp3 throughput and IOPS are set; images come from ECR.
run "boot_dependencies" {
  command = plan
  assert {
    condition     = aws_autoscaling_lifecycle_hook.launch["fleet"].heartbeat_timeout == 300 && aws_autoscaling_group.this.default_instance_warmup == 300
    error_message = "launch hook timeout"
  }
  assert {
    condition     = strcontains(output.user_data, "(while sleep 60; do hook record-lifecycle-action-heartbeat || true; done) &") && strcontains(output.user_data, "timeout --kill-after=30 2700 fleetscribe-stack")
    error_message = "the boot does not heartbeat its launch hook, or has no timeout of its own"
  }
  assert {
    condition     = aws_launch_template.this.block_device_mappings[0].ebs[0].iops == 6000 && aws_launch_template.this.block_device_mappings[0].ebs[0].throughput == 500
    error_message = "the root volume runs at gp3's baseline"
  }
}

run "public_images_refused" {
  command = plan
  variables {
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
      MODEL_S3_URI              = "s3://fs-models/asr/"
      WORKER_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:1"
      TRITON_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/tritonserver:24.10-py3"
      # CUDA_IMAGE unset: the compose default, from Docker Hub
    }
  }
  expect_failures = [aws_launch_template.this]
}

run "public_images_allowed_on_purpose" {
  command = plan
  variables {
    allow_public_images = true
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
      MODEL_S3_URI              = "s3://fs-models/asr/"
    }
  }
}

run "volume_throughput_over_iops_refused" {
  command = plan
  variables {
    root_volume_iops       = 3000
    root_volume_throughput = 1000
  }
  expect_failures = [aws_launch_template.this]
}

# Item 5: the hooks exist before the first instance launches (the warm pool
# fills at creation), the pool is bounded, and cannot hibernate or run.
run "warm_pool" {
  command = plan
  variables {
    warm_pool = { enabled = true }
  }
  assert {
    condition     = length(aws_autoscaling_group.this.initial_lifecycle_hook) == 2 && toset([for h in aws_autoscaling_group.this.initial_lifecycle_hook : h.default_result]) == toset(["ABANDON", "CONTINUE"])
    error_message = "the group's first instances could launch before the launch and drain hooks exist"
  }
  assert {
    condition     = aws_autoscaling_group.this.warm_pool[0].max_group_prepared_capacity == 1 && aws_autoscaling_group.this.warm_pool[0].min_size == 1
    error_message = "the warm pool fills to max_size"
  }
  # Headed for the pool, an instance prepares and is stopped: the stack is
  # not started, so no job is taken by an instance about to stop.
  assert {
    condition     = strcontains(output.user_data, "Warmed:*) mode=prepare ;;") && strcontains(output.user_data, "if [ \"$mode\" = prepare ]; then exit 0; fi\nfleetscribe-worker mps up")
    error_message = "an instance headed for the warm pool starts its stack"
  }
  # At shutdown the stack goes, so Docker cannot restart it at the next boot.
  assert {
    condition     = strcontains(output.user_data, "ExecStop=/bin/sh -c '[ ! -f docker-compose.override.yml ] || docker compose down -t 1860'")
    error_message = "a stale stack is restarted by Docker when the instance leaves the pool"
  }
}

run "warm_pool_hibernated_refused" {
  command = plan
  variables {
    warm_pool = { enabled = true, pool_state = "Hibernated" }
  }
  expect_failures = [var.warm_pool]
}

run "warm_pool_running_refused" {
  command = plan
  variables {
    warm_pool = { enabled = true, pool_state = "Running" }
  }
  expect_failures = [var.warm_pool]
}

run "warm_pool_larger_than_fleet_refused" {
  command = plan
  variables {
    warm_pool = { enabled = true, min_gpus = 2, max_prepared_gpus = 8 }
  }
  expect_failures = [aws_autoscaling_group.this]
}

# Item 6: the scale-from-zero alarm watches desired capacity (not in-service
# instances, which are zero for the whole boot of the first one), for three
# minutes, repeating a late data point.
run "scale_from_zero_alarm" {
  command = plan
  assert {
    condition     = one([for q in aws_cloudwatch_metric_alarm.scale_from_zero.metric_query : q.metric[0].metric_name if q.id == "desired"]) == "GroupDesiredCapacity"
    error_message = "scale-from-zero does not watch desired capacity"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.scale_from_zero.evaluation_periods == 3 && aws_cloudwatch_metric_alarm.scale_from_zero.datapoints_to_alarm == 3
    error_message = "scale-from-zero fires on one period (metric lag)"
  }
  assert {
    condition     = strcontains(one([for q in aws_cloudwatch_metric_alarm.scale_from_zero.metric_query : q.expression if q.id == "waiting_with_nothing_desired"]), "FILL(FILL(desired, REPEAT), 0) == 0")
    error_message = "a late desired-capacity data point reads as zero"
  }
}

# Item 6: a weighted bulk queue; in-flight messages count only up to what
# the in-service GPUs can hold. (TestBacklogMetricMath evaluates it.)
run "weighted_backlog" {
  command = plan
  variables {
    queue_weights = { "fs-bulk" = 0.1 }
  }
  assert {
    condition     = output.backlog_expression == "(0.1 * visible1 + visible0 + IF(0.1 * inflight1 + inflight0 < desired * 1 * 16, 0.1 * inflight1 + inflight0, desired * 1 * 16)) / (desired * 1)"
    error_message = "backlog expression: ${output.backlog_expression}"
  }
}

run "bulk_left_out_of_scaling" {
  command = plan
  variables {
    queue_weights = { "fs-bulk" = 0 }
  }
  assert {
    condition     = length([for m in aws_autoscaling_policy.backlog_per_gpu.target_tracking_configuration[0].customized_metric_specification[0].metrics : m if m.metric_stat != null && length(m.metric_stat) > 0 && try(m.metric_stat[0].metric[0].dimensions[0].value, "") == "fs-bulk"]) == 0
    error_message = "a queue of weight 0 still takes metric slots"
  }
}

run "every_queue_weighted_out_refused" {
  command = plan
  variables {
    queue_weights = { "fs-live" = 0, "fs-bulk" = 0 }
  }
  expect_failures = [aws_autoscaling_policy.backlog_per_gpu]
}

# Target tracking on metric math takes at most 10 metrics.
run "too_many_queues_refused" {
  command = plan
  variables {
    queue_names = ["q1", "q2", "q3", "q4", "q5"]
  }
  expect_failures = [var.queue_names]
}

# Item 7: the AMI is pinned at plan time (from the parameter, or given),
# never resolved by EC2 at launch.
run "ami_pinned" {
  command = plan
  assert {
    condition     = aws_launch_template.this.image_id == "ami-0123456789abcdef0"
    error_message = "the launch template does not pin the AMI read from the parameter"
  }
}

# The root volume goes on the AMI's own root device, whatever it is named.
run "root_volume_on_the_amis_root_device" {
  command = plan
  override_data {
    target = data.aws_ami.root
    values = { root_device_name = "/dev/xvda" }
  }
  assert {
    condition     = one(aws_launch_template.this.block_device_mappings).device_name == "/dev/xvda"
    error_message = "the root volume is not mapped to the AMI's root device (an Amazon Linux 2023 AMI's /dev/xvda)"
  }
}

# SQS keeps a message in hand 12 hours at most.
run "job_timeout_past_sqs_cap_refused" {
  command = plan
  variables {
    job_timeout_seconds   = 43201
    drain_timeout_seconds = 43201
  }
  expect_failures = [var.job_timeout_seconds]
}

run "ami_given" {
  command = plan
  variables {
    ami_id = "ami-0fedcba9876543210"
  }
  assert {
    condition     = aws_launch_template.this.image_id == "ami-0fedcba9876543210" && length(data.aws_ssm_parameter.ami) == 0
    error_message = "a given AMI is not used alone"
  }
}

# Item 8: default tags reach what Auto Scaling launches; logs go to the
# fleet's log group; alarms on failed boots and short launches.
run "operations" {
  command = plan
  assert {
    condition     = alltrue([for ts in aws_launch_template.this.tag_specifications : ts.tags["team"] == "asr" && ts.tags["cost-centre"] == "speech" && ts.tags["Name"] == "fs-fleet"])
    error_message = "the provider's default tags do not reach instances and volumes"
  }
  assert {
    condition     = aws_cloudwatch_log_group.this.name == "/fleetscribe/fs-fleet" && strcontains(output.user_data, "\nLOG_GROUP=/fleetscribe/fs-fleet\n") && strcontains(output.user_data, "-log-driver awslogs")
    error_message = "container logs are not shipped to the fleet's log group"
  }
  # A CloudWatch Logs stall must not block the containers' stdout.
  assert {
    condition     = strcontains(output.user_data, "-log-opt mode=non-blocking -log-opt max-buffer-size=8m")
    error_message = "container logs block the containers when CloudWatch Logs stalls"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.boot_failures["fleet"].metric_name == "BootFailures" && aws_cloudwatch_metric_alarm.boot_failures["fleet"].namespace == "fleetscribe" && strcontains(output.user_data, "--namespace 'fleetscribe' --metric-name BootFailures")
    error_message = "the boot-failure alarm does not watch what the boot publishes"
  }
  assert {
    condition     = one([for q in aws_cloudwatch_metric_alarm.launch_shortfall.metric_query : q.expression if q.return_data]) == "IF(desired > in_service + pending, 1, 0)" && contains(aws_autoscaling_group.this.enabled_metrics, "GroupPendingCapacity")
    error_message = "launch shortfall"
  }
  # An ABANDON loop (a replacement always launching) and boots that die
  # before the start script: desired above in service, pending or not,
  # for longer than a boot may take (2,700 s) and the shortfall's 15 min.
  assert {
    condition     = one([for q in aws_cloudwatch_metric_alarm.never_in_service["fleet"].metric_query : q.expression if q.return_data]) == "IF(desired > in_service AND FILL(DIFF(in_service), 0) <= 0, 1, 0)" && aws_cloudwatch_metric_alarm.never_in_service["fleet"].evaluation_periods == 60 && aws_cloudwatch_metric_alarm.never_in_service["fleet"].datapoints_to_alarm == 60 && aws_cloudwatch_metric_alarm.never_in_service["fleet"].treat_missing_data == "notBreaching" && contains(aws_autoscaling_group.this.instance_refresh[0].preferences[0].alarm_specification[0].alarms, "fs-fleet-never-in-service")
    error_message = "no alarm on launches that never reach service, or it does not stop a refresh"
  }
  # A period without boots is not a failure.
  assert {
    condition     = aws_cloudwatch_metric_alarm.boot_failures["fleet"].treat_missing_data == "notBreaching"
    error_message = "the boot-failure alarm fires on periods without boots"
  }
  assert {
    condition     = strcontains(output.user_data, "set-instance-health") && strcontains(output.user_data, "readyz?local=1")
    error_message = "no instance health check of the worker and Triton"
  }
}

run "drain_shorter_than_jobs_refused" {
  command = plan
  variables {
    drain_timeout_seconds = 300
  }
  expect_failures = [aws_launch_template.this]
}

run "settings_the_module_owns_refused" {
  command = plan
  variables {
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
      MODEL_S3_URI              = "s3://fs-models/asr/"
      FLEETSCRIBE_CONCURRENCY   = "64"
      WORKER_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:1"
      TRITON_IMAGE              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/tritonserver:24.10-py3"
      CUDA_IMAGE                = "000000000000.dkr.ecr.us-east-1.amazonaws.com/cuda:12.4.1-base-ubuntu22.04"
    }
  }
  expect_failures = [aws_launch_template.this]
}

run "no_input_allow_list_refused" {
  command = plan
  variables {
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      MODEL_S3_URI              = "s3://fs-models/asr/"
    }
  }
  expect_failures = [var.worker_environment]
}

# Two-hour recordings: a job timeout and drain past AWS's longest hook
# heartbeat timeout (7,200 s) plan, the drain's heartbeats carrying the hook.
run "drain_past_two_hours" {
  command = plan
  variables {
    job_timeout_seconds   = 9000
    drain_timeout_seconds = 9000
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain["fleet"].heartbeat_timeout == 7200 && strcontains(output.user_data, "docker compose stop -t 9060") && strcontains(output.user_data, "record-lifecycle-action-heartbeat")
    error_message = "a drain past 7,020 s does not plan, or is not heartbeated"
  }
  # Deleting the group (or an aborted canary's) waits out every drain.
  assert {
    condition     = aws_autoscaling_group.this.timeouts.delete == "163m"
    error_message = "deleting the group gives up before a 9,000-s drain ends"
  }
}

run "drain_past_the_global_timeout_refused" {
  command = plan
  variables {
    job_timeout_seconds   = 43200
    drain_timeout_seconds = 172700
  }
  expect_failures = [aws_launch_template.this]
}

# An instance refresh takes 10 alarms: the fleet's three and 7 more.
run "too_many_refresh_alarms_refused" {
  command = plan
  variables {
    refresh_stop_alarm_names = [for i in range(8) : "alarm-${i}"]
  }
  expect_failures = [var.refresh_stop_alarm_names]
}

# The old names counted GPUs under AWS's instance words: refused, saying so.
run "max_size_refused" {
  command = plan
  variables {
    max_size = 4
  }
  expect_failures = [var.max_size]
}

# The reviewer's surviving mutations, each pinned here (a drain shorter
# than a job: drain_shorter_than_jobs_refused above).

# Warm-pool sizes are GPUs: on 8-GPU instances, 8 GPUs are one instance.
run "warm_pool_in_gpus_on_eight_gpu_instances" {
  command = plan
  variables {
    instance_types           = ["g6e.48xlarge"]
    max_gpus                 = 32
    warm_pool                = { enabled = true, min_gpus = 8, max_prepared_gpus = 16 }
    scale_from_zero_capacity = 16
  }
  assert {
    condition     = aws_autoscaling_group.this.warm_pool[0].min_size == 1 && aws_autoscaling_group.this.warm_pool[0].max_group_prepared_capacity == 2 && aws_autoscaling_group.this.max_size == 4
    error_message = "warm-pool or group sizes not converted from GPUs to 8-GPU instances"
  }
  # A group counted in instances adds 16 GPUs as two instances, not 16.
  assert {
    condition     = [for a in aws_autoscaling_policy.scale_from_zero.step_adjustment : a.scaling_adjustment] == [2]
    error_message = "scale from zero adds scale_from_zero_capacity instances, not GPUs"
  }
}

# A version the template does not have yet is refused, for the pin and
# the canary (the template's newest version made known at plan).
run "pin_past_the_newest_version_refused" {
  command = plan
  override_resource {
    target          = aws_launch_template.this
    override_during = plan
    values          = { latest_version = 3, id = "lt-0123456789abcdef0" }
  }
  variables {
    launch_template_version = 4
  }
  expect_failures = [aws_autoscaling_group.this]
}

run "canary_past_the_newest_version_refused" {
  command = plan
  override_resource {
    target          = aws_launch_template.this
    override_during = plan
    values          = { latest_version = 3, id = "lt-0123456789abcdef0" }
  }
  variables {
    launch_template_version = 3
    canary                  = { version = 4 }
  }
  expect_failures = [aws_autoscaling_group.canary[0]]
}

run "newest_version_pinned_and_canaried" {
  command = plan
  override_resource {
    target          = aws_launch_template.this
    override_during = plan
    values          = { latest_version = 4, id = "lt-0123456789abcdef0" }
  }
  variables {
    launch_template_version = 3
    canary                  = { version = 4 }
  }
  assert {
    condition     = aws_autoscaling_group.canary[0].launch_template[0].version == "4"
    error_message = "a canary of the newest version is refused"
  }
}

# A boot longer than the launch hook can be kept alive (100 heartbeat
# timeouts), or a hook that a missed heartbeat or two would end, is
# refused; so is a drain a second shorter than the longest job.
run "boot_past_the_launch_hooks_global_timeout_refused" {
  command = plan
  variables {
    boot_timeout_seconds = 30001
  }
  expect_failures = [aws_launch_template.this]
}

run "launch_hook_under_three_heartbeats_refused" {
  command = plan
  variables {
    launch_heartbeat_timeout_seconds = 179
  }
  expect_failures = [var.launch_heartbeat_timeout_seconds]
}

run "drain_a_second_short_refused" {
  command = plan
  variables {
    drain_timeout_seconds = 1799
  }
  expect_failures = [aws_launch_template.this]
}

# The boot completes the hooks the group has (the group's version is
# pinned in terraform_test.go: it is not known at plan).
run "launches_the_version_and_hooks_it_made" {
  command = plan
  assert {
    condition     = strcontains(output.user_data, "--lifecycle-hook-name '${aws_autoscaling_lifecycle_hook.launch["fleet"].name}'") && strcontains(output.user_data, "--lifecycle-hook-name '${aws_autoscaling_lifecycle_hook.drain["fleet"].name}'")
    error_message = "the user data completes a lifecycle hook the group does not have"
  }
  # unhealthy_after_seconds 300 at a check every 30 s: 10 failed checks in
  # a row, not one.
  assert {
    condition     = strcontains(output.user_data, "if [ \"$n\" -ge 10 ]; then")
    error_message = "the health check marks an instance unhealthy after the wrong number of failed checks"
  }
}

# Item 1: a rollout that can be undone. The fleet runs the pinned release
# (launch_template_version) while a canary group runs the new version
# beside it, with alarms of its own; promoting moves the fleet to it (and
# removes the canary), aborting removes the canary and leaves the fleet
# where it was. Nothing the canary does touches the fleet's group.
run "canary_beside_the_release" {
  command = plan
  variables {
    launch_template_version = 3
    canary                  = { version = 4 }
    dead_letter_queue_names = ["fs-live-dlq", "fs-bulk-dlq"]
  }
  assert {
    condition     = aws_autoscaling_group.this.mixed_instances_policy[0].launch_template[0].launch_template_specification[0].version == "3" && output.fleet_launch_template_version == 3
    error_message = "the fleet does not stay on the pinned release while a canary runs"
  }
  assert {
    condition = (aws_autoscaling_group.canary[0].name == "fs-fleet-canary" && aws_autoscaling_group.canary[0].launch_template[0].version == "4"
    && aws_autoscaling_group.canary[0].min_size == 1 && aws_autoscaling_group.canary[0].max_size == 1 && aws_autoscaling_group.canary[0].desired_capacity == 1)
    error_message = "the canary is not one instance of the new version on a group of its own"
  }
  # The same hooks as the fleet's: its instances boot, drain and report as
  # the fleet's do, to their own group (user data's fleetscribe-group).
  assert {
    condition = (toset([for h in aws_autoscaling_group.canary[0].initial_lifecycle_hook : "${h.name}/${h.default_result}"]) ==
    toset(["fs-fleet-launch/ABANDON", "fs-fleet-drain/CONTINUE"]))
    error_message = "the canary's instances lack the launch or drain hook"
  }
  assert {
    condition = (aws_cloudwatch_metric_alarm.boot_failures["canary"].dimensions.AutoScalingGroupName == "fs-fleet-canary"
      && toset(flatten([for q in aws_cloudwatch_metric_alarm.never_in_service["canary"].metric_query : [for m in q.metric : m.dimensions.AutoScalingGroupName]])) == toset(["fs-fleet-canary"])
      && aws_cloudwatch_metric_alarm.boot_failures["fleet"].dimensions.AutoScalingGroupName == "fs-fleet"
    && output.canary.alarm_names == ["fs-fleet-canary-boot-failures", "fs-fleet-canary-never-in-service", "fs-fleet-canary-job-failures", "fs-fleet-canary-dead-letters"])
    error_message = "the canary's boot failures or shortfall are not alarmed on its own group"
  }
  # It takes production jobs: its failed share is compared with the
  # fleet's (jobs counted by group from the workers' log lines), and a
  # message reaching a DLQ while it runs is said.
  assert {
    condition = (toset([for q in aws_cloudwatch_metric_alarm.canary_job_failures[0].metric_query : "${q.id}:${q.metric[0].metric_name}:${q.metric[0].dimensions.AutoScalingGroupName}" if length(q.metric) > 0]) ==
      toset(["cdone:JobsDone:fs-fleet-canary", "cfail:JobsFailed:fs-fleet-canary", "fdone:JobsDone:fs-fleet", "ffail:JobsFailed:fs-fleet"])
      && alltrue([for f in aws_cloudwatch_log_metric_filter.jobs : f.log_group_name == "/fleetscribe/fs-fleet" && f.metric_transformation[0].dimensions.AutoScalingGroupName == "$.group" && f.metric_transformation[0].namespace == "fleetscribe"])
    && toset([for q in aws_cloudwatch_metric_alarm.canary_dead_letters[0].metric_query : q.metric[0].dimensions.QueueName if length(q.metric) > 0]) == toset(["fs-live-dlq", "fs-bulk-dlq"]))
    error_message = "the canary's job failures are not compared with the fleet's, or the DLQs are not watched while it runs"
  }
  # A hook setting changed later is updated in place, on the canary as on
  # the fleet: a change to initial_lifecycle_hook would replace the group.
  assert {
    condition = (aws_autoscaling_lifecycle_hook.launch["canary"].autoscaling_group_name == "fs-fleet-canary" && aws_autoscaling_lifecycle_hook.launch["canary"].default_result == "ABANDON"
    && aws_autoscaling_lifecycle_hook.drain["canary"].autoscaling_group_name == "fs-fleet-canary" && aws_autoscaling_lifecycle_hook.drain["canary"].heartbeat_timeout == 1800 + 180)
    error_message = "the canary's hooks are not resources of their own"
  }
  # A new canary version replaces the instances of the one before, and an
  # abort (deleting the group) waits for a 30-minute job's drain.
  assert {
    condition     = aws_autoscaling_group.canary[0].instance_refresh[0].preferences[0].min_healthy_percentage == 100 && aws_autoscaling_group.canary[0].timeouts.delete == "43m"
    error_message = "a new canary version leaves the old instances running, or an abort gives up mid-drain"
  }
  # The canary's alarms say "do not promote"; they never stop the fleet's
  # refreshes (the fleet is not changing).
  assert {
    condition     = !contains(aws_autoscaling_group.this.instance_refresh[0].preferences[0].alarm_specification[0].alarms, "fs-fleet-canary-boot-failures")
    error_message = "the canary's alarms stop the fleet's refresh"
  }
}

run "promoted" {
  command = plan
  variables {
    launch_template_version = 4
  }
  assert {
    condition     = aws_autoscaling_group.this.mixed_instances_policy[0].launch_template[0].launch_template_specification[0].version == "4" && length(aws_autoscaling_group.canary) == 0 && output.canary == null
    error_message = "promoting does not move the fleet to the canary's version and end the canary"
  }
  assert {
    condition     = keys(aws_cloudwatch_metric_alarm.boot_failures) == ["fleet"] && keys(aws_cloudwatch_metric_alarm.never_in_service) == ["fleet"] && length(aws_cloudwatch_metric_alarm.canary_job_failures) == 0 && length(aws_cloudwatch_metric_alarm.canary_dead_letters) == 0
    error_message = "the canary's alarms outlive it"
  }
}

run "aborted" {
  command = plan
  variables {
    launch_template_version = 3
  }
  assert {
    condition     = aws_autoscaling_group.this.mixed_instances_policy[0].launch_template[0].launch_template_specification[0].version == "3" && length(aws_autoscaling_group.canary) == 0
    error_message = "aborting the canary moves the fleet"
  }
}

run "canary_of_the_release_refused" {
  command = plan
  variables {
    launch_template_version = 3
    canary                  = { version = 3 }
  }
  expect_failures = [aws_autoscaling_group.canary]
}

# F19: spot on or off, the group counts GPUs: its sizes mean the same, so
# the desired and minimum sizes Terraform leaves alone keep their meaning.
run "on_demand_counts_gpus" {
  command = plan
  variables {
    instance_types = ["g6e.12xlarge", "g6e.48xlarge"]
    max_gpus       = 16
  }
  assert {
    condition = (aws_autoscaling_group.this.max_size == 16 && length(aws_autoscaling_group.this.mixed_instances_policy) == 1
      && aws_autoscaling_group.this.mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 100
    && aws_autoscaling_group.this.mixed_instances_policy[0].instances_distribution[0].on_demand_allocation_strategy == "prioritized")
    error_message = "an on-demand fleet does not count GPUs (or is not all on-demand, in order)"
  }
}

run "spot_counts_gpus_too" {
  command = plan
  variables {
    instance_types = ["g6e.12xlarge", "g6e.48xlarge"]
    max_gpus       = 16
    spot           = { enabled = true }
  }
  assert {
    condition     = aws_autoscaling_group.this.max_size == 16 && aws_autoscaling_group.this.mixed_instances_policy[0].instances_distribution[0].on_demand_percentage_above_base_capacity == 0
    error_message = "turning spot on changes what the group's sizes mean"
  }
}

run "warm_pool_counts_instances" {
  command = plan
  variables {
    instance_types = ["g6e.12xlarge"]
    max_gpus       = 16
    warm_pool      = { enabled = true, min_gpus = 4 }
  }
  assert {
    condition     = aws_autoscaling_group.this.max_size == 4 && aws_autoscaling_group.this.warm_pool[0].min_size == 1
    error_message = "a warm-pool fleet does not convert GPUs to instances"
  }
}

# Item 7: the warm pool's and the scheduled actions' sizes are GPUs too,
# and their old instance-counting names are refused with a message.
run "scheduled_gpus" {
  command = plan
  variables {
    instance_types = ["g6e.48xlarge"]
    max_gpus       = 32
    warm_pool      = { enabled = true, min_gpus = 8 }
    scheduled_scaling = {
      night = { recurrence = "0 22 * * *", min_gpus = 16, max_gpus = 32, desired_gpus = 16 }
    }
  }
  assert {
    condition     = aws_autoscaling_schedule.this["night"].min_size == 2 && aws_autoscaling_schedule.this["night"].max_size == 4 && aws_autoscaling_schedule.this["night"].desired_capacity == 2
    error_message = "scheduled GPUs are not converted to 8-GPU instances"
  }
}

run "old_warm_pool_names_refused" {
  command = plan
  variables {
    warm_pool = { enabled = true, min_size = 1 }
  }
  expect_failures = [var.warm_pool]
}

run "old_schedule_names_refused" {
  command = plan
  variables {
    scheduled_scaling = {
      night = { recurrence = "0 22 * * *", min_gpus = 1, max_gpus = 4, desired_capacity = 2 }
    }
  }
  expect_failures = [var.scheduled_scaling]
}

# The GPU fleet: an Auto Scaling group of g6e instances (weighted by GPUs),
# each booting the worker, the MPS daemon and its Triton partitions from one
# launch template; launch and drain lifecycle hooks; target tracking on the
# queues' backlog per GPU, scale from zero, scheduled floors; a rollout that
# can be undone (a pinned release and a canary); the fleet's own alarms and
# log group.

data "aws_default_tags" "current" {}

data "aws_ssm_parameter" "ami" {
  count = var.ami_id == null ? 1 : 0
  name  = var.ami_ssm_parameter
}

# The AMI's own root device: /dev/sda1 on Ubuntu and the Deep Learning
# AMIs, /dev/xvda on Amazon Linux 2023 and Bottlerocket. A mapping under
# another name attaches the volume as a second, unused disk and leaves
# the root at the AMI's size.
data "aws_ami" "root" {
  filter {
    name   = "image-id"
    values = [local.ami_id]
  }
}

locals {
  # GPUs per g6e size. Capacity is counted in GPUs: with spot the group is
  # a mixed instances group weighted by GPUs, so AWS counts GPUs itself;
  # otherwise it runs one size and sizes are converted to instances.
  gpus_per_instance = {
    "g6e.xlarge"   = 1, "g6e.2xlarge" = 1, "g6e.4xlarge" = 1, "g6e.8xlarge" = 1, "g6e.16xlarge" = 1,
    "g6e.12xlarge" = 4, "g6e.24xlarge" = 4, "g6e.48xlarge" = 8,
  }
  # The group is weighted by GPUs (a mixed instances policy: spot or
  # on-demand) unless it has a warm pool, which takes no mixed instances
  # policy: then it runs the first size and counts instances. So turning
  # spot on or off never changes what desired capacity means.
  weighted      = !var.warm_pool.enabled
  capacity_unit = local.weighted ? 1 : local.gpus_per_instance[var.instance_types[0]]

  # The drain hook's heartbeat timeout: the drain, stopping the stack
  # included, where AWS allows it (30-7,200 s); the drain's heartbeats
  # every 30 s carry a longer one up to the global timeout.
  drain_hook_timeout = min(var.drain_timeout_seconds + 180, 7200)

  # Deleting a group (the canary at an abort, the fleet at a destroy) waits
  # for its instances to terminate, each through its drain: the drain and
  # the stack's stop, and ten minutes for the terminations themselves. The
  # provider's default (10 minutes) fails the apply mid-drain.
  group_delete_timeout = "${ceil((var.drain_timeout_seconds + 180) / 60) + 10}m"

  # How long desired capacity may exceed what is in service before the
  # never-in-service alarm fires: a boot, and the shortfall's minutes more.
  never_in_service_minutes = ceil(var.boot_timeout_seconds / 60) + var.launch_shortfall_minutes

  # Pinned when Terraform plans, never resolved at launch: an AMI published
  # to the parameter reaches the fleet through an apply and its refresh.
  ami_id = var.ami_id != null ? var.ami_id : nonsensitive(data.aws_ssm_parameter.ami[0].insecure_value)

  # Provider default_tags tag what Terraform creates; instances and volumes
  # are launched by Auto Scaling, so the launch template carries them.
  tags = merge(data.aws_default_tags.current.tags, var.tags, { Name = var.name })

  # The version the fleet runs: the pinned release, or the newest.
  fleet_version = coalesce(var.launch_template_version, aws_launch_template.this.latest_version)
  canary_name   = "${var.name}-canary"
  # The groups with boot-failure and never-in-service alarms of their own.
  alarm_groups = merge({ fleet = { name = var.name, what = var.name } }, var.canary == null ? {} : {
    canary = { name = local.canary_name, what = "the canary of ${var.name} (launch template version ${var.canary.version}: do not promote it)" }
  })

  lifecycle_hook = "${var.name}-drain"
  launch_hook    = "${var.name}-launch"
  log_group      = coalesce(var.log_group_name, "/fleetscribe/${var.name}")
  # The worker's line at the end of every job (worker/job.go) carries its
  # outcome and, on an instance, its group (cmd/worker's -asg-name).
  job_metrics = {
    done   = { metric = "JobsDone", pattern = "{ $.message = \"job done\" }" }
    failed = { metric = "JobsFailed", pattern = "{ ($.message = \"job done\") && (($.outcome = \"failed\") || ($.outcome = \"retry\")) }" }
  }
  metric_ns    = "fleetscribe"
  compose_yaml = var.compose_yaml != null ? var.compose_yaml : file("${path.module}/../../../docker-compose.yml")
  # Where the model repository is on the instance: the boot syncs
  # MODEL_S3_URI into it, and the Triton services mount it (compose's own
  # default, ./deploy/triton/models, is nothing on an instance).
  model_repository = lookup(var.worker_environment, "MODEL_REPOSITORY", "/opt/fleetscribe/models")
  # The GPU repository's diarizer (Sortformer) separates 4 speakers: a job
  # asking for more is refused before any GPU time. A repository of another
  # diarizer sets its own limit in worker_environment.
  worker_defaults = { FLEETSCRIBE_DIARIZE_MAX_SPEAKERS = "4" }
  env = merge(local.worker_defaults, var.worker_environment, { MODEL_REPOSITORY = local.model_repository }, {
    FLEETSCRIBE_JOB_TIMEOUT   = "${var.job_timeout_seconds}s"
    FLEETSCRIBE_DRAIN_TIMEOUT = "${var.drain_timeout_seconds}s"
    # No scale-in protection: the instance a scale-in picks drains (stops
    # receiving, finishes what it holds). Protected while holding a job or
    # 30 s after one, every instance of a busy fleet stays protected and the
    # group never shrinks (lab/bench/scalein: 2.25x the instance-hours needed
    # against 1.16x with the drain).
    FLEETSCRIBE_SCALE_IN_PROTECTION = "false"
    FLEETSCRIBE_ASG_NAME            = var.name
    # With capacity rebalancing the group launches a replacement on a
    # rebalance recommendation and then terminates this instance through
    # the drain; stopping at the recommendation would idle GPUs that still
    # count as capacity.
    FLEETSCRIBE_DRAIN_ON_REBALANCE = "false"
    # Container logs go to CloudWatch Logs (worker mps up sets the driver).
    LOG_GROUP = aws_cloudwatch_log_group.this.name
    }, var.bulk_queue_url == null ? {} : {
    FLEETSCRIBE_BULK_QUEUE_URL = var.bulk_queue_url
  })
  images = [for k in ["WORKER_IMAGE", "TRITON_IMAGE", "CUDA_IMAGE"] : lookup(var.worker_environment, k, "")]
  user_data = templatefile("${path.module}/user_data.sh.tftpl", {
    compose_gz_b64  = base64gzip(local.compose_yaml)
    env             = local.env
    lifecycle_hook  = local.lifecycle_hook
    launch_hook     = local.launch_hook
    asg_name        = var.name
    per_gpu         = var.partitions_per_gpu
    jobs_per_gpu    = var.jobs_per_gpu
    drain_seconds   = var.drain_timeout_seconds
    boot_seconds    = var.boot_timeout_seconds
    heartbeat_every = 60
    unhealthy_after = ceil(var.unhealthy_after_seconds / 30)
    metric_ns       = local.metric_ns
    # The worker needs a little past its drain timeout to hand unfinished
    # jobs back to the queue before compose kills it.
    stop_seconds = var.drain_timeout_seconds + 60
  })
}

locals {
  user_data_gz_b64 = base64gzip(local.user_data)
  # What EC2 counts against its 16 KB: the bytes before base64.
  user_data_bytes = floor(length(local.user_data_gz_b64) * 3 / 4) - length(regexall("=", local.user_data_gz_b64))
}

resource "aws_cloudwatch_log_group" "this" {
  name              = local.log_group
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn
  tags              = var.tags
}

resource "aws_launch_template" "this" {
  name_prefix   = "${var.name}-"
  image_id      = local.ami_id
  instance_type = var.instance_types[0]
  # Gzipped: cloud-init decompresses it before running the script, and
  # EC2's 16 KB counts the compressed bytes.
  user_data = local.user_data_gz_b64

  vpc_security_group_ids = var.security_group_ids

  iam_instance_profile {
    name = var.instance_profile_name
  }

  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required" # IMDSv2 only
    # Containers sit one hop further from the instance.
    http_put_response_hop_limit = 2
    instance_metadata_tags      = "disabled"
  }

  block_device_mappings {
    device_name = data.aws_ami.root.root_device_name
    ebs {
      volume_size           = var.root_volume_size_gb
      volume_type           = "gp3"
      iops                  = var.root_volume_iops
      throughput            = var.root_volume_throughput
      encrypted             = true
      kms_key_id            = var.ebs_kms_key_arn
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tags = var.tags

  lifecycle {
    precondition {
      condition     = local.user_data_bytes <= 16384
      error_message = "User data exceeds EC2's 16 KB limit, gzipped; shorten compose_yaml or worker_environment."
    }
    precondition {
      condition     = var.drain_timeout_seconds + 180 <= 172800
      error_message = "drain_timeout_seconds must be at most 172,620 (48 h less 3 minutes): the drain hook's global timeout is 48 h (100 heartbeat timeouts at most), and the drain needs 3 minutes past the worker's drain to stop the stack."
    }
    precondition {
      condition     = var.drain_timeout_seconds >= var.job_timeout_seconds
      error_message = "drain_timeout_seconds must be at least job_timeout_seconds: a shorter drain hands long jobs back at every termination, to start again from zero (and, hit often enough, to the DLQ)."
    }
    precondition {
      condition     = length(setintersection(keys(var.worker_environment), ["FLEETSCRIBE_JOB_TIMEOUT", "FLEETSCRIBE_DRAIN_TIMEOUT", "FLEETSCRIBE_CONCURRENCY", "FLEETSCRIBE_DRAIN_ON_REBALANCE", "LOG_GROUP"])) == 0
      error_message = "worker_environment must not set FLEETSCRIBE_JOB_TIMEOUT, FLEETSCRIBE_DRAIN_TIMEOUT, FLEETSCRIBE_CONCURRENCY, FLEETSCRIBE_DRAIN_ON_REBALANCE or LOG_GROUP: the module sets them (job_timeout_seconds, drain_timeout_seconds, jobs_per_gpu) and checks them against each other and the scaling policy."
    }
    precondition {
      condition     = lookup(var.worker_environment, "MODEL_S3_URI", "") != "" || contains(keys(var.worker_environment), "MODEL_REPOSITORY")
      error_message = "worker_environment needs MODEL_S3_URI (the model repository in S3, synced into MODEL_REPOSITORY at every boot) or MODEL_REPOSITORY (a model repository the AMI already holds): without either, Triton has no model and no boot reaches service."
    }
    precondition {
      condition     = var.root_volume_throughput <= var.root_volume_iops / 4
      error_message = "root_volume_throughput (MiB/s) can be at most a quarter of root_volume_iops on gp3."
    }
    precondition {
      condition     = var.allow_public_images || alltrue([for i in local.images : can(regex("^[0-9]{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com(\\.cn)?/", i))])
      error_message = "WORKER_IMAGE, TRITON_IMAGE and CUDA_IMAGE in worker_environment must be ECR images (ACCOUNT.dkr.ecr.REGION.amazonaws.com/...): anonymous Docker Hub pulls are rate-limited per address, and a scale-out behind one NAT fails mid-boot. Mirror them (or use ECR pull-through cache), or set allow_public_images."
    }
    precondition {
      condition     = var.boot_timeout_seconds <= 100 * var.launch_heartbeat_timeout_seconds && var.boot_timeout_seconds <= 172800
      error_message = "boot_timeout_seconds exceeds the launch hook's global timeout (100 x launch_heartbeat_timeout_seconds, at most 48 h)."
    }
  }
}

resource "aws_autoscaling_group" "this" {
  name                = var.name
  min_size            = ceil(var.min_gpus / local.capacity_unit)
  max_size            = ceil(var.max_gpus / local.capacity_unit)
  vpc_zone_identifier = var.subnet_ids
  # EC2 status checks, and the instance's own health check (worker and
  # Triton, fleetscribe-health.timer), which marks it unhealthy through
  # SetInstanceHealth. The launch hook holds the instance until its stack
  # is up, so the grace period starts when it enters service.
  health_check_type         = "EC2"
  health_check_grace_period = var.instance_warmup_seconds
  default_instance_warmup   = var.instance_warmup_seconds
  capacity_rebalance        = var.spot.enabled
  # Target tracking owns desired capacity.
  metrics_granularity = "1Minute"
  enabled_metrics     = ["GroupInServiceInstances", "GroupInServiceCapacity", "GroupDesiredCapacity", "GroupPendingInstances", "GroupPendingCapacity", "GroupTerminatingInstances", "GroupMinSize"]

  # The hooks exist before the first instance launches (into service or the
  # warm pool). These blocks only act at creation (and would replace the
  # group if changed, hence ignore_changes); the hook resources below own
  # the hooks' settings from then on, updating them in place.
  initial_lifecycle_hook {
    name                 = local.launch_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_LAUNCHING"
    heartbeat_timeout    = var.launch_heartbeat_timeout_seconds
    default_result       = "ABANDON"
  }
  initial_lifecycle_hook {
    name                 = local.lifecycle_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = local.drain_hook_timeout
    default_result       = "CONTINUE"
  }

  dynamic "launch_template" {
    for_each = local.weighted ? [] : [1]
    content {
      id      = aws_launch_template.this.id
      version = local.fleet_version
    }
  }

  # Weighted by GPUs, spot or not: on-demand takes instance_types in their
  # order (the first while it has capacity, the next when it has none).
  dynamic "mixed_instances_policy" {
    for_each = local.weighted ? [1] : []
    content {
      instances_distribution {
        on_demand_allocation_strategy            = "prioritized"
        on_demand_base_capacity                  = var.spot.enabled ? var.spot.on_demand_base_capacity : 0
        on_demand_percentage_above_base_capacity = var.spot.enabled ? var.spot.on_demand_percentage_above_base_capacity : 100
        spot_allocation_strategy                 = var.spot.spot_allocation_strategy
      }
      launch_template {
        launch_template_specification {
          launch_template_id = aws_launch_template.this.id
          version            = local.fleet_version
        }
        dynamic "override" {
          for_each = var.instance_types
          content {
            instance_type     = override.value
            weighted_capacity = tostring(local.gpus_per_instance[override.value])
          }
        }
      }
    }
  }

  # Prepared capacity is bounded: without max_group_prepared_capacity AWS
  # fills the pool up to max_size (one cold boot and one stopped volume per
  # instance the fleet could ever have).
  dynamic "warm_pool" {
    for_each = var.warm_pool.enabled ? [1] : []
    content {
      pool_state                  = var.warm_pool.pool_state
      min_size                    = ceil(var.warm_pool.min_gpus / local.capacity_unit)
      max_group_prepared_capacity = ceil(coalesce(var.warm_pool.max_prepared_gpus, var.warm_pool.min_gpus) / local.capacity_unit)
    }
  }

  # Launch before terminating (a one-instance fleet keeps its instance until
  # the new one is in service), skip instances already on the new template,
  # replace any instance protected from scale-in through the drain, and stop
  # when a new boot fails or launches fall short. No auto rollback: the
  # provider points the group at the new version before it starts the
  # refresh (it sends no desired configuration), so AWS's rollback would
  # "restore" the new version while it held the fleet for the rollback's
  # length; a stopped refresh is undone by `fleetctl undo` (the README's
  # "Undo").
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage       = 100
      max_healthy_percentage       = 200
      skip_matching                = true
      instance_warmup              = var.instance_warmup_seconds
      scale_in_protected_instances = "Refresh"
      auto_rollback                = false
      alarm_specification {
        alarms = concat([aws_cloudwatch_metric_alarm.boot_failures["fleet"].alarm_name, aws_cloudwatch_metric_alarm.launch_shortfall.alarm_name, aws_cloudwatch_metric_alarm.never_in_service["fleet"].alarm_name], var.refresh_stop_alarm_names)
      }
    }
  }

  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = false # the launch template tags instances and volumes
    }
  }

  timeouts {
    delete = local.group_delete_timeout
  }

  lifecycle {
    # Target tracking owns desired capacity, and scheduled actions (the
    # overnight floor) own min_size once the group exists: an apply inside
    # the bulk window must not undo the floor. min_size is set at creation.
    ignore_changes = [desired_capacity, min_size, initial_lifecycle_hook]

    precondition {
      condition     = !(var.warm_pool.enabled && var.spot.enabled)
      error_message = "A warm pool cannot be used with spot instances: enable one of warm_pool and spot, not both."
    }
    precondition {
      condition     = var.max_gpus >= var.min_gpus && var.max_gpus >= var.scale_from_zero_capacity
      error_message = "max_gpus must be at least min_gpus and scale_from_zero_capacity (all in GPUs)."
    }
    precondition {
      condition     = !var.warm_pool.enabled || coalesce(var.warm_pool.max_prepared_gpus, var.warm_pool.min_gpus) <= var.max_gpus
      error_message = "warm_pool.max_prepared_gpus (or min_gpus) must not exceed max_gpus."
    }
    precondition {
      condition     = var.launch_template_version == null ? true : var.launch_template_version <= aws_launch_template.this.latest_version
      error_message = "launch_template_version is past the template's newest version (output launch_template_latest_version)."
    }
  }
}

# The canary: the version under trial on a small group of its own, beside
# the fleet, which stays on launch_template_version. Its instances boot
# with the same template (they find their own group's name, hooks and
# metrics: user data's fleetscribe-group), take real jobs from the same
# queues and drain on termination; nothing scales it. A failed boot
# abandons its instance and fires the canary's own alarms; the fleet is
# untouched until launch_template_version is set to the canary's version.
resource "aws_autoscaling_group" "canary" {
  count               = var.canary == null ? 0 : 1
  name                = local.canary_name
  min_size            = var.canary.instances
  max_size            = var.canary.instances
  desired_capacity    = var.canary.instances
  vpc_zone_identifier = var.subnet_ids
  health_check_type   = "EC2"
  # The instance's own health check (fleetscribe-health.timer) counts from
  # when it enters service, after the launch hook.
  health_check_grace_period = var.instance_warmup_seconds
  metrics_granularity       = "1Minute"
  enabled_metrics           = ["GroupInServiceCapacity", "GroupDesiredCapacity", "GroupPendingCapacity"]

  initial_lifecycle_hook {
    name                 = local.launch_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_LAUNCHING"
    heartbeat_timeout    = var.launch_heartbeat_timeout_seconds
    default_result       = "ABANDON"
  }
  initial_lifecycle_hook {
    name                 = local.lifecycle_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = local.drain_hook_timeout
    default_result       = "CONTINUE"
  }

  launch_template {
    id      = aws_launch_template.this.id
    version = var.canary.version
  }

  # A new canary version replaces the instances of the one before
  # (launching first); without it they would run on, taking jobs with a
  # version no longer under trial. No rollback: the canary's alarms say
  # what failed, and the fleet is untouched either way.
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 100
      max_healthy_percentage = 200
      skip_matching          = true
      instance_warmup        = var.instance_warmup_seconds
    }
  }

  dynamic "tag" {
    for_each = merge(local.tags, { Name = local.canary_name })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = false
    }
  }

  # An abort deletes the group while its instances drain jobs.
  timeouts {
    delete = local.group_delete_timeout
  }

  lifecycle {
    # As the fleet's: the hook resources below own the hooks' settings, a
    # change to these blocks would replace the group (its instances drain,
    # a new one boots).
    ignore_changes = [initial_lifecycle_hook]

    precondition {
      condition     = var.canary.version <= aws_launch_template.this.latest_version
      error_message = "canary.version is past the template's newest version (output launch_template_latest_version)."
    }
    precondition {
      condition     = var.canary.version != local.fleet_version
      error_message = "canary.version is the version the fleet already runs: a canary tries a new one (pin launch_template_version to the release, and give the canary launch_template_latest_version)."
    }
  }
}

# The hooks' settings after creation: these resources update them in place
# (PutLifecycleHook), where a change to a group's initial_lifecycle_hook
# would replace the whole group. Each group has both, the fleet's and the
# canary's while there is one.

# Terminating instances wait here while the worker drains; the instance's
# drain service completes the action (or it times out and continues).
resource "aws_autoscaling_lifecycle_hook" "drain" {
  for_each               = local.hooked_groups
  name                   = local.lifecycle_hook
  autoscaling_group_name = each.value
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_TERMINATING"
  # The drain heartbeats every 30 s, so a drain past AWS's longest
  # heartbeat timeout (7,200 s) lasts up to the hook's global timeout.
  heartbeat_timeout = local.drain_hook_timeout
  default_result    = "CONTINUE"
}

# Launching instances wait here until the boot service is done: one headed
# for the warm pool only prepares (images, model, worker binary) and is
# stopped; one headed for service (new, or leaving the pool) starts its
# stack and waits for the worker to report ready. It heartbeats the hook
# every minute meanwhile; a boot that fails, or outlasts
# boot_timeout_seconds, abandons the instance.
resource "aws_autoscaling_lifecycle_hook" "launch" {
  for_each               = local.hooked_groups
  name                   = local.launch_hook
  autoscaling_group_name = each.value
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
  heartbeat_timeout      = var.launch_heartbeat_timeout_seconds
  default_result         = "ABANDON"
}

locals {
  # The groups whose hooks the resources above own, by the same keys as
  # alarm_groups (the names through the groups, so each hook follows its
  # group).
  hooked_groups = merge({ fleet = aws_autoscaling_group.this.name }, var.canary == null ? {} : { canary = aws_autoscaling_group.canary[0].name })
}

moved {
  from = aws_autoscaling_lifecycle_hook.drain
  to   = aws_autoscaling_lifecycle_hook.drain["fleet"]
}

moved {
  from = aws_autoscaling_lifecycle_hook.launch
  to   = aws_autoscaling_lifecycle_hook.launch["fleet"]
}

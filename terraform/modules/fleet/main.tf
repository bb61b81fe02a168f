locals {
  # GPUs per g6e size. Capacity is counted in GPUs: with spot the group is
  # a mixed instances group weighted by GPUs, so AWS counts GPUs itself;
  # otherwise it runs one size and sizes are converted to instances.
  gpus_per_instance = {
    "g6e.xlarge"   = 1, "g6e.2xlarge" = 1, "g6e.4xlarge" = 1, "g6e.8xlarge" = 1, "g6e.16xlarge" = 1,
    "g6e.12xlarge" = 4, "g6e.24xlarge" = 4, "g6e.48xlarge" = 8,
  }
  capacity_unit = var.spot.enabled ? 1 : local.gpus_per_instance[var.instance_types[0]]

  lifecycle_hook = "${var.name}-drain"
  launch_hook    = "${var.name}-launch"
  compose_yaml   = var.compose_yaml != null ? var.compose_yaml : file("${path.module}/../../../docker-compose.yml")
  env = merge(var.worker_environment, {
    FLEETSCRIBE_JOB_TIMEOUT   = "${var.job_timeout_seconds}s"
    FLEETSCRIBE_DRAIN_TIMEOUT = "${var.drain_timeout_seconds}s"
    # While it holds jobs the worker protects its instance from scale-in
    # (a scale-in then picks an idle instance); the IAM module grants the
    # call on this group only.
    FLEETSCRIBE_SCALE_IN_PROTECTION = "true"
    FLEETSCRIBE_ASG_NAME            = var.name
    }, var.bulk_queue_url == null ? {} : {
    FLEETSCRIBE_BULK_QUEUE_URL = var.bulk_queue_url
  })
  user_data = templatefile("${path.module}/user_data.sh.tftpl", {
    compose_gz_b64 = base64gzip(local.compose_yaml)
    env            = local.env
    lifecycle_hook = local.lifecycle_hook
    launch_hook    = local.launch_hook
    asg_name       = var.name
    per_gpu        = var.partitions_per_gpu
    drain_seconds  = var.drain_timeout_seconds
    # The worker needs a little past its drain timeout to hand unfinished
    # jobs back to the queue before compose kills it.
    stop_seconds = var.drain_timeout_seconds + 60
  })
}

resource "aws_launch_template" "this" {
  name_prefix   = "${var.name}-"
  image_id      = "resolve:ssm:${var.ami_ssm_parameter}"
  instance_type = var.instance_types[0]
  user_data     = base64encode(local.user_data)

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
    device_name = "/dev/sda1"
    ebs {
      volume_size           = var.root_volume_size_gb
      volume_type           = "gp3"
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
    tags          = merge(var.tags, { Name = var.name })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(var.tags, { Name = var.name })
  }

  tags = var.tags

  lifecycle {
    precondition {
      condition     = length(local.user_data) <= 16384
      error_message = "User data exceeds EC2's 16 KB limit; shorten compose_yaml or worker_environment."
    }
    precondition {
      condition     = var.drain_timeout_seconds >= var.job_timeout_seconds
      error_message = "drain_timeout_seconds must be at least job_timeout_seconds: a shorter drain hands long jobs back at every termination, to start again from zero (and, hit often enough, to the DLQ)."
    }
    precondition {
      condition     = !contains(keys(var.worker_environment), "FLEETSCRIBE_JOB_TIMEOUT") && !contains(keys(var.worker_environment), "FLEETSCRIBE_DRAIN_TIMEOUT")
      error_message = "Set the job and drain timeouts with job_timeout_seconds and drain_timeout_seconds, not worker_environment: the module checks one against the other."
    }
  }
}

resource "aws_autoscaling_group" "this" {
  name                      = var.name
  min_size                  = ceil(var.min_size / local.capacity_unit)
  max_size                  = ceil(var.max_size / local.capacity_unit)
  vpc_zone_identifier       = var.subnet_ids
  health_check_type         = "EC2"
  health_check_grace_period = var.instance_warmup_seconds
  default_instance_warmup   = var.instance_warmup_seconds
  capacity_rebalance        = var.spot.enabled
  # Target tracking owns desired capacity.
  metrics_granularity = "1Minute"
  enabled_metrics     = ["GroupInServiceInstances", "GroupInServiceCapacity", "GroupDesiredCapacity", "GroupPendingInstances", "GroupTerminatingInstances"]

  dynamic "launch_template" {
    for_each = var.spot.enabled ? [] : [1]
    content {
      id      = aws_launch_template.this.id
      version = aws_launch_template.this.latest_version
    }
  }

  dynamic "mixed_instances_policy" {
    for_each = var.spot.enabled ? [1] : []
    content {
      instances_distribution {
        on_demand_base_capacity                  = var.spot.on_demand_base_capacity
        on_demand_percentage_above_base_capacity = var.spot.on_demand_percentage_above_base_capacity
        spot_allocation_strategy                 = var.spot.spot_allocation_strategy
      }
      launch_template {
        launch_template_specification {
          launch_template_id = aws_launch_template.this.id
          version            = aws_launch_template.this.latest_version
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

  dynamic "warm_pool" {
    for_each = var.warm_pool.enabled ? [1] : []
    content {
      pool_state                  = var.warm_pool.pool_state
      min_size                    = var.warm_pool.min_size
      max_group_prepared_capacity = var.warm_pool.max_group_prepared_capacity
    }
  }

  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 50
    }
  }

  dynamic "tag" {
    for_each = merge(var.tags, { Name = var.name })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = false # the launch template tags instances and volumes
    }
  }

  lifecycle {
    # Target tracking owns desired capacity, and scheduled actions (the
    # overnight floor) own min_size once the group exists: an apply inside
    # the bulk window must not undo the floor. min_size is set at creation.
    ignore_changes = [desired_capacity, min_size]

    precondition {
      condition     = !(var.warm_pool.enabled && var.spot.enabled)
      error_message = "A warm pool cannot be used with spot instances: enable one of warm_pool and spot, not both."
    }
    precondition {
      condition     = var.max_size >= var.min_size && var.max_size >= var.scale_from_zero_capacity
      error_message = "max_size must be at least min_size and scale_from_zero_capacity (all in GPUs)."
    }
  }
}

# Lifecycle hooks are their own resources: their settings update in place,
# where the group's initial_lifecycle_hook would replace the whole group.

# Terminating instances wait here while the worker drains; the instance's
# drain service completes the action (or it times out and continues).
resource "aws_autoscaling_lifecycle_hook" "drain" {
  name                   = local.lifecycle_hook
  autoscaling_group_name = aws_autoscaling_group.this.name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_TERMINATING"
  heartbeat_timeout      = var.drain_timeout_seconds + 180
  default_result         = "CONTINUE"
}

# Launching instances (into service or into the warm pool) wait here until
# the instance's boot service has the stack up; it runs on every boot, so a
# warm instance leaving the pool starts its workers again before it is put
# in service. A boot that fails abandons the instance.
resource "aws_autoscaling_lifecycle_hook" "launch" {
  name                   = local.launch_hook
  autoscaling_group_name = aws_autoscaling_group.this.name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
  heartbeat_timeout      = var.instance_warmup_seconds
  default_result         = "ABANDON"
}

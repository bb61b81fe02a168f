# Plans and applies the example against a mocked AWS provider in its main
# variants and checks what a real apply depends on. Run by `make tf-validate`.

mock_provider "aws" {
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "000000000000"
    }
  }
  mock_data "aws_partition" {
    defaults = {
      partition = "aws"
    }
  }
  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }
  mock_resource "aws_launch_template" {
    defaults = {
      id = "lt-0123456789abcdef0"
    }
  }
  mock_resource "aws_autoscaling_policy" {
    defaults = {
      arn = "arn:aws:autoscaling:us-east-1:000000000000:scalingPolicy:00000000-0000-0000-0000-000000000000:autoScalingGroupName/fs-test-workers:policyName/p"
    }
  }
  mock_resource "aws_sqs_queue" {
    defaults = {
      arn = "arn:aws:sqs:us-east-1:000000000000:fs-test-q"
      url = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-test-q"
    }
  }
  mock_resource "aws_s3_bucket" {
    defaults = {
      arn = "arn:aws:s3:::fs-test-bucket"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::000000000000:role/fs-test-worker"
    }
  }
  mock_resource "aws_kms_key" {
    defaults = {
      arn = "arn:aws:kms:us-east-1:000000000000:key/own"
    }
  }
  mock_resource "aws_sns_topic" {
    defaults = {
      arn = "arn:aws:sns:us-east-1:000000000000:fs-test-alarms"
    }
  }
}

variables {
  region                  = "us-east-1"
  name                    = "fs-test"
  vpc_id                  = "vpc-0123456789abcdef0"
  private_subnet_ids      = ["subnet-0123456789abcdef0"]
  input_bucket_name       = "fs-test-input"
  output_bucket_name      = "fs-test-output"
  worker_image            = "000000000000.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:1"
  triton_image            = "000000000000.dkr.ecr.us-east-1.amazonaws.com/tritonserver:24.10-py3"
  cuda_image              = "000000000000.dkr.ecr.us-east-1.amazonaws.com/cuda:12.4.1-base-ubuntu22.04"
  model_repository_s3_uri = "s3://fs-test-models/asr/"
  alarm_email             = "oncall@example.com"
}

# The alarms notify someone: a topic made here with the address
# subscribed, or the topics given.
run "alarms_reach_someone" {
  command = plan
  assert {
    condition     = aws_sns_topic.alarms[0].name == "fs-test-alarms" && aws_sns_topic_subscription.alarm_email[0].endpoint == "oncall@example.com" && aws_sns_topic_subscription.alarm_email[0].protocol == "email"
    error_message = "no alarms topic with the address subscribed"
  }
}

run "alarms_to_given_topics" {
  command = plan
  variables {
    alarm_topic_arns = ["arn:aws:sns:us-east-1:000000000000:oncall"]
    alarm_email      = null
  }
  assert {
    condition     = length(aws_sns_topic.alarms) == 0 && output.alarm_topic_arns == tolist(["arn:aws:sns:us-east-1:000000000000:oncall"])
    error_message = "the given topics are not the alarms' actions"
  }
}

run "alarms_to_nobody_refused" {
  command = plan
  variables {
    alarm_email = null
  }
  expect_failures = [var.alarm_email]
}

run "defaults" {
  command = apply

  assert {
    condition     = module.fleet.autoscaling_group_name == "fs-test-workers"
    error_message = "unexpected group name"
  }
  assert {
    condition     = length(module.queues.queue_urls) == 2 && contains(keys(module.queues.dlq_names), "live")
    error_message = "the live and bulk queues, each with a DLQ, are expected"
  }
  assert {
    condition     = module.buckets.kms_key_arn == "arn:aws:kms:us-east-1:000000000000:key/own"
    error_message = "without a supplied key the buckets use their own"
  }
  # Item 1: scaling from zero adds capacity; it never sets it.
  assert {
    condition     = module.fleet.scale_from_zero_adjustment_type == "ChangeInCapacity"
    error_message = "scale-from-zero must not set an exact capacity"
  }
  # Item 3: both lifecycle hooks exist as their own resources.
  assert {
    condition     = module.fleet.lifecycle_hooks.drain.heartbeat_timeout == 1800 + 180 && module.fleet.lifecycle_hooks.launch.default_result == "ABANDON"
    error_message = "lifecycle hooks missing or wrong"
  }
  # Items 6 and 7: the worker gets time to hand jobs back, and every
  # worker_environment setting reaches the instance's .env.
  assert {
    condition     = strcontains(module.fleet.user_data, "docker compose stop -t 1860") && strcontains(module.fleet.user_data, "FLEETSCRIBE_JOB_TIMEOUT=1800s")
    error_message = "user data: stop timeout or job timeout missing"
  }
  # Item 8: the model repository is set, and copied at boot.
  assert {
    condition     = strcontains(module.fleet.user_data, "MODEL_S3_URI=s3://fs-test-models/asr/") && strcontains(module.fleet.user_data, "aws s3 sync")
    error_message = "the model repository does not reach the instance"
  }
}

run "spot" {
  command = apply

  variables {
    spot = { enabled = true, on_demand_base_capacity = 1 }
  }

  assert {
    condition     = module.fleet.uses_mixed_instances_policy
    error_message = "spot needs a mixed instances policy"
  }
}

# Multi-GPU sizes: with spot the group mixes 1-, 4- and 8-GPU instances,
# each weighted by its GPUs, and scales on backlog per in-service GPU.
run "mixed_gpu_sizes" {
  command = apply

  variables {
    spot           = { enabled = true }
    instance_types = ["g6e.12xlarge", "g6e.48xlarge", "g6e.xlarge"]
    max_gpus       = 32
  }

  assert {
    condition     = module.fleet.instance_weights == { "g6e.12xlarge" = "4", "g6e.48xlarge" = "8", "g6e.xlarge" = "1" }
    error_message = "instances are not weighted by their GPUs"
  }
  assert {
    condition     = module.fleet.group_size.max == 32 && module.fleet.capacity_metric == "GroupDesiredCapacity"
    error_message = "a weighted group counts GPUs: max_size and the in-service metric are in GPUs"
  }
  assert {
    condition     = endswith(module.fleet.backlog_expression, "/ (desired * 1)")
    error_message = "backlog is not divided by in-service GPUs"
  }
}

# Without spot the group runs one size: GPUs are converted to instances,
# and the backlog is divided by instances x GPUs per instance.
run "eight_gpu_instances" {
  command = apply

  variables {
    instance_types = ["g6e.48xlarge"]
    max_gpus       = 20
  }

  # Weighted by GPUs, spot or not: the group's sizes are GPUs.
  assert {
    condition     = module.fleet.group_size.max == 20 && module.fleet.capacity_metric == "GroupDesiredCapacity" && module.fleet.instance_weights == { "g6e.48xlarge" = "8" }
    error_message = "20 GPUs of 8-GPU instances are not counted as 20 GPUs"
  }
  assert {
    condition     = endswith(module.fleet.backlog_expression, "/ (desired * 1)")
    error_message = "backlog per GPU of 8-GPU instances"
  }
  assert {
    condition     = strcontains(module.fleet.user_data, "plan=(-gpus auto -per-gpu 8 -jobs-per-gpu 16 ")
    error_message = "the instance does not render its partitions from the GPUs present"
  }
}

run "warm_pool" {
  command = apply

  variables {
    warm_pool = { enabled = true, min_gpus = 1 }
  }

  assert {
    condition     = module.fleet.warm_pool_state == "Stopped"
    error_message = "the warm pool should hold stopped instances"
  }
}

# Item 2: a Running warm pool would take jobs from inside the pool.
run "warm_pool_running_refused" {
  command = plan

  variables {
    warm_pool = { enabled = true, pool_state = "Running" }
  }

  expect_failures = [var.warm_pool]
}

run "warm_pool_with_spot_refused" {
  command = plan

  variables {
    spot      = { enabled = true }
    warm_pool = { enabled = true }
  }

  expect_failures = [var.warm_pool]
}

run "bulk_window" {
  command = apply

  variables {
    bulk_window = { enabled = true, min_gpus = 3 }
  }

  assert {
    condition     = length(module.fleet.schedule_names) == 2
    error_message = "the bulk window needs a start and an end action"
  }
  # Item 5: outside the window the bulk queue counts at most the daytime
  # floor's worth (GroupMinSize above min_gpus opens it), and its waiting
  # backfill neither starts the fleet nor fires backlog-without-instances.
  assert {
    condition     = strcontains(module.fleet.backlog_expression, "IF(minsize * 1 > 0, 0.1 * visible0, IF(0.1 * visible0 < 0, 0.1 * visible0, 0)) + visible1")
    error_message = "a daytime backfill is not capped by the floor"
  }
  assert {
    condition     = length(module.alarms.no_capacity_queues) == 1 && endswith(module.alarms.no_capacity_queues[0], "-live")
    error_message = "a bulk backfill waiting for the window fires backlog-without-instances"
  }
}

run "several_queues" {
  command = apply

  variables {
    queues = ["live", "bulk", "priority"]
  }

  assert {
    condition     = length(module.queues.queue_urls) == 3 && length(module.queues.dlq_names) == 3
    error_message = "each queue needs its DLQ"
  }
}

# Item 5: five queues would need 12 metrics in the scaling policy.
run "too_many_queues_refused" {
  command = plan

  variables {
    queues = ["live", "bulk", "a", "b", "c"]
  }

  expect_failures = [var.queues]
}

run "supplied_kms_key" {
  command = apply

  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:000000000000:key/supplied"
  }

  assert {
    condition     = module.buckets.kms_key_arn == "arn:aws:kms:us-east-1:000000000000:key/supplied"
    error_message = "a supplied key must be used, not a new one"
  }
}

# User data fits EC2's 16 KB with room to spare for what a real fleet is
# called and runs: the example's suggested name, images from two ECR
# registries in two regions, a warm pool, the bulk window (its script is
# 16.5 KB before gzip, over the limit).
run "user_data_fits_for_real_names" {
  command = apply

  variables {
    name         = "fleetscribe-prod"
    worker_image = "111122223333.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:2026.12.05-9f8e7d6"
    triton_image = "444455556666.dkr.ecr.us-west-2.amazonaws.com/nvidia/tritonserver:24.10-py3"
    cuda_image   = "444455556666.dkr.ecr.us-west-2.amazonaws.com/docker-hub/nvidia/cuda:12.4.1-base-ubuntu22.04"
    warm_pool    = { enabled = true, min_gpus = 2 }
    bulk_window  = { enabled = true }
    tags         = { team = "ml-infra", cost-center = "transcription", environment = "production" }
  }

  assert {
    condition     = module.fleet.user_data_bytes <= 12288
    error_message = "user data leaves less than a quarter of EC2's 16 KB for longer names and settings"
  }
  assert {
    condition     = length(module.fleet.user_data) > 16384 && strcontains(module.fleet.user_data, "WORKER_IMAGE=111122223333.dkr.ecr.us-east-1.amazonaws.com/fleetscribe/worker:2026.12.05-9f8e7d6")
    error_message = "the test's inputs are not the realistic ones it names"
  }
}

# The same with a long name, three queues (the most with a bulk window)
# and every optional setting the user data carries.
run "user_data_fits_for_long_names" {
  command = apply

  variables {
    name         = "fleetscribe-clinical-transcription-prod-eu-central-1"
    region       = "eu-central-1"
    queues       = ["live", "bulk", "reprocess-model-upgrade"]
    worker_image = "111122223333.dkr.ecr.eu-central-1.amazonaws.com/clinical-speech/fleetscribe/worker:2026.12.05-9f8e7d6c5b4a"
    triton_image = "444455556666.dkr.ecr.eu-west-1.amazonaws.com/nvidia/tritonserver:24.10-py3"
    cuda_image   = "777788889999.dkr.ecr.us-east-1.amazonaws.com/docker-hub/nvidia/cuda:12.4.1-base-ubuntu22.04"
    warm_pool    = { enabled = true, min_gpus = 4 }
    bulk_window  = { enabled = true }
  }

  assert {
    condition     = module.fleet.user_data_bytes <= 12288
    error_message = "user data leaves less than a quarter of EC2's 16 KB for a long name and three queues"
  }
}

# Plans the fleet module alone against a mocked AWS provider: what the
# worker's environment gets, and the settings the module refuses. Run by
# `make tf-validate`.

mock_provider "aws" {
  mock_resource "aws_launch_template" {
    defaults = {
      id = "lt-0123456789abcdef0"
    }
  }
}

variables {
  name                   = "fs-fleet"
  subnet_ids             = ["subnet-0123456789abcdef0"]
  security_group_ids     = ["sg-0123456789abcdef0"]
  instance_profile_name  = "fs-fleet-worker"
  max_size               = 4
  queue_names            = ["fs-live"]
  backlog_per_gpu_target = 600
  worker_environment = {
    FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
    FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
    FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
  }
}

# The worker protects its busy instance from scale-in, and its drain is as
# long as its longest job.
run "defaults" {
  command = plan
  assert {
    condition = alltrue([for s in ["FLEETSCRIBE_SCALE_IN_PROTECTION=true", "FLEETSCRIBE_ASG_NAME=fs-fleet", "FLEETSCRIBE_JOB_TIMEOUT=1800s",
    "FLEETSCRIBE_DRAIN_TIMEOUT=1800s", "docker compose stop -t 1860"] : strcontains(output.user_data, s)])
    error_message = "user data: scale-in protection, job timeout or drain missing"
  }
}

run "drain_shorter_than_jobs_refused" {
  command = plan
  variables {
    drain_timeout_seconds = 300
  }
  expect_failures = [aws_launch_template.this]
}

run "job_timeout_in_worker_environment_refused" {
  command = plan
  variables {
    worker_environment = {
      FLEETSCRIBE_QUEUE_URL     = "https://sqs.us-east-1.amazonaws.com/000000000000/fs-live"
      FLEETSCRIBE_OUTPUT_BUCKET = "fs-out"
      FLEETSCRIBE_INPUT_BUCKETS = "fs-in"
      FLEETSCRIBE_JOB_TIMEOUT   = "3600s"
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
    }
  }
  expect_failures = [var.worker_environment]
}

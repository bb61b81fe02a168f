# Plans the example with the real AWS provider (offline: fake credentials;
# the data sources that would call AWS are overridden), so the policies and
# settings asserted here are what the provider renders, not a mock's. What
# only an apply shows is in example.tftest.hcl (mock provider). Run by
# `make tf-validate`.

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true

  default_tags {
    tags = { team = "asr" }
  }
}

override_data {
  target = module.iam.data.aws_caller_identity.current
  values = { account_id = "000000000000" }
}
override_data {
  target = module.kms.data.aws_caller_identity.current
  values = { account_id = "000000000000" }
}
override_data {
  target = module.notifications.data.aws_caller_identity.current
  values = { account_id = "000000000000" }
}
override_data {
  target = module.fleet.data.aws_ssm_parameter.ami[0]
  values = { insecure_value = "ami-0123456789abcdef0" }
}
override_data {
  target = module.fleet.data.aws_ami.root
  values = { root_device_name = "/dev/sda1" }
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

# Item 7: the example's own key lets S3 deliver notifications from the
# input bucket to the encrypted queues, and CloudWatch Logs encrypt the
# fleet's log group; the worker role may use it and read the models.
run "own_key" {
  command = plan
  assert {
    condition     = strcontains(module.kms.policy_json, "\"S3NotificationsToEncryptedQueues\"") && strcontains(module.kms.policy_json, "arn:aws:s3:::fs-test-input") && strcontains(module.kms.policy_json, "log-group:/fleetscribe/fs-test-workers")
    error_message = "the example's key policy lacks what S3 and CloudWatch Logs need"
  }
  assert {
    condition     = !strcontains(module.kms.policy_json, "AWSServiceRoleForAutoScaling")
    error_message = "the key names the Auto Scaling role without encrypt_volumes_with_kms_key"
  }
  assert {
    condition     = module.fleet.log_group_name == "/fleetscribe/fs-test-workers"
    error_message = "the key and the fleet disagree on the log group"
  }
}

run "volumes_with_the_key" {
  command = plan
  variables {
    encrypt_volumes_with_kms_key = true
  }
  assert {
    condition     = strcontains(module.kms.policy_json, "\"AutoScalingEncryptsVolumes\"") && strcontains(module.kms.policy_json, "\"AutoScalingGrantsToEC2\"")
    error_message = "volumes encrypted with a key Auto Scaling may not use: every launch would fail"
  }
}

# A supplied key: nothing is created, and the statements to merge into its
# policy are an output.
run "supplied_key" {
  command = plan
  variables {
    kms_key_arn = "arn:aws:kms:us-east-1:000000000000:key/supplied"
  }
  assert {
    condition     = output.kms_key_arn == "arn:aws:kms:us-east-1:000000000000:key/supplied" && module.kms.key_arn == null && strcontains(output.kms_key_policy_statements, "S3NotificationsToEncryptedQueues")
    error_message = "a supplied key"
  }
}

# Item 6: with the bulk window the bulk queue's messages count a tenth.
run "bulk_weight" {
  command = plan
  variables {
    bulk_window = { enabled = true }
  }
  assert {
    condition     = strcontains(module.fleet.backlog_expression, "0.1 * visible")
    error_message = "the bulk queue counts in full in the daytime"
  }
}

# Item 8: the provider's default tags reach instances and volumes.
run "default_tags_reach_instances" {
  command = plan
  assert {
    condition     = module.fleet.instance_tags["team"] == "asr"
    error_message = "default tags do not reach what Auto Scaling launches"
  }
}

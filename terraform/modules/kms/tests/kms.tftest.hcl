# Plans the kms module with the real AWS provider (offline), so the key
# policy asserted here is the JSON the provider renders. Run by
# `make tf-validate`.

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

override_data {
  target = data.aws_caller_identity.current
  values = { account_id = "000000000000" }
}

variables {
  name             = "fs-test"
  input_bucket_arn = "arn:aws:s3:::fs-in"
  log_group_name   = "/fleetscribe/fs-test-workers"
  encrypt_volumes  = true
}

# Item 7: S3 may use the key to deliver notifications to the encrypted
# queue, from the input bucket of this account alone; CloudWatch Logs for
# the fleet's log group alone; Auto Scaling's service-linked role for the
# instances' volumes, and grants only for AWS resources.
run "key_policy" {
  command = plan
  assert {
    condition     = one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "S3NotificationsToEncryptedQueues"]).Principal.Service == "s3.amazonaws.com" && toset(one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "S3NotificationsToEncryptedQueues"]).Action) == toset(["kms:GenerateDataKey", "kms:Decrypt"])
    error_message = "S3 cannot use the key for notifications to encrypted queues"
  }
  assert {
    condition     = one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "S3NotificationsToEncryptedQueues"]).Condition.ArnEquals["aws:SourceArn"] == "arn:aws:s3:::fs-in" && one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "S3NotificationsToEncryptedQueues"]).Condition.StringEquals["aws:SourceAccount"] == "000000000000"
    error_message = "S3's use of the key is not limited to the input bucket of this account"
  }
  assert {
    condition     = one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "LogsEncryptTheLogGroup"]).Condition.ArnEquals["kms:EncryptionContext:aws:logs:arn"] == "arn:aws:logs:us-east-1:000000000000:log-group:/fleetscribe/fs-test-workers"
    error_message = "CloudWatch Logs cannot encrypt the fleet's log group, or may encrypt any"
  }
  assert {
    condition     = one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "AutoScalingEncryptsVolumes"]).Principal.AWS == "arn:aws:iam::000000000000:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
    error_message = "Auto Scaling cannot launch instances with volumes the key encrypts"
  }
  assert {
    condition     = one([for s in jsondecode(aws_kms_key.this[0].policy).Statement : s if s.Sid == "AutoScalingGrantsToEC2"]).Condition.Bool["kms:GrantIsForAWSResource"] == "true"
    error_message = "Auto Scaling's grants are not limited to AWS resources"
  }
  assert {
    condition     = aws_kms_key.this[0].enable_key_rotation
    error_message = "key rotation off"
  }
}

# A key managed elsewhere: the same statements, to merge into its policy.
run "statements_for_a_key_managed_elsewhere" {
  command = plan
  variables {
    create_key      = false
    encrypt_volumes = false
  }
  assert {
    condition     = length(aws_kms_key.this) == 0 && toset([for s in jsondecode(output.service_statements_json).Statement : s.Sid]) == toset(["S3NotificationsToEncryptedQueues", "LogsEncryptTheLogGroup"])
    error_message = "the statements for a supplied key"
  }
}

# Plans the iam module with the real AWS provider (offline: fake
# credentials; the caller identity is overridden), so the policies asserted
# here are the JSON aws_iam_policy_document renders, not a mock's. Run by
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
  name                    = "fs-worker"
  queue_arns              = ["arn:aws:sqs:us-east-1:000000000000:fs-live", "arn:aws:sqs:us-east-1:000000000000:fs-bulk"]
  input_bucket_arn        = "arn:aws:s3:::fs-in"
  output_bucket_arn       = "arn:aws:s3:::fs-out"
  output_prefix           = "transcripts/"
  autoscaling_group_name  = "fs-workers"
  kms_key_arns            = ["arn:aws:kms:us-east-1:000000000000:key/data"]
  model_repository_s3_uri = "s3://fs-models/asr/"
  model_kms_key_arn       = "arn:aws:kms:us-east-1:000000000000:key/models"
  log_group_name          = "/fleetscribe/fs-workers"
}

# Statements of the worker's policy, with Action and Resource as lists
# (the JSON has a plain string where there is one).
run "policy" {
  command = plan

  # Item 8: the worker may delete its claims and provisional error records,
  # and nothing else: never a transcript.
  assert {
    condition = toset(flatten([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Resource]) if contains(flatten([s.Action]), "s3:DeleteObject")])) == toset([
      "arn:aws:s3:::fs-out/transcripts/*.claim", "arn:aws:s3:::fs-out/transcripts/*.error.json",
    ])
    error_message = "s3:DeleteObject reaches beyond claims and error records"
  }
  # Item 8: the health check marks its own instance unhealthy, in its own
  # group only; so do protection and lifecycle calls.
  assert {
    condition = alltrue([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement :
      toset(flatten([s.Resource])) == toset(["arn:aws:autoscaling:us-east-1:000000000000:autoScalingGroup:*:autoScalingGroupName/fs-workers", "arn:aws:autoscaling:us-east-1:000000000000:autoScalingGroup:*:autoScalingGroupName/fs-workers-canary"])
    if anytrue([for a in flatten([s.Action]) : startswith(a, "autoscaling:") && a != "autoscaling:DescribeAutoScalingInstances"])])
    error_message = "Auto Scaling calls are not limited to the worker's group and its canary"
  }
  # The one read: which group the instance is in (the boot asks once).
  assert {
    condition = one([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Action])
    if contains(flatten([s.Action]), "autoscaling:DescribeAutoScalingInstances")]) == ["autoscaling:DescribeAutoScalingInstances"]
    error_message = "DescribeAutoScalingInstances is granted with other Auto Scaling actions on every group"
  }
  assert {
    condition     = contains(flatten([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Action])]), "autoscaling:SetInstanceHealth")
    error_message = "the instance health check cannot mark its instance unhealthy"
  }
  # Boot failures are published in the fleet's namespace alone.
  assert {
    condition = one([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : s.Condition.StringEquals["cloudwatch:namespace"]
    if contains(flatten([s.Action]), "cloudwatch:PutMetricData")]) == "fleetscribe"
    error_message = "PutMetricData is not limited to the fleet's namespace"
  }
  # Container logs go to the fleet's log group alone.
  assert {
    condition = flatten([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Resource]) if contains(flatten([s.Action]), "logs:PutLogEvents")]) == [
      "arn:aws:logs:us-east-1:000000000000:log-group:/fleetscribe/fs-workers:log-stream:*",
    ]
    error_message = "log shipping is not limited to the fleet's log group"
  }
  # Item 7: the model repository's own key may decrypt, as the data key may.
  assert {
    condition = toset(flatten([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Resource]) if contains(flatten([s.Action]), "kms:Decrypt")])) == toset([
      "arn:aws:kms:us-east-1:000000000000:key/data", "arn:aws:kms:us-east-1:000000000000:key/models",
    ])
    error_message = "the model repository's key is not granted"
  }
  # Item 8: Session Manager instead of SSH.
  assert {
    condition = toset(flatten([for s in jsondecode(aws_iam_role_policy.session_manager[0].policy).Statement : flatten([s.Action])])) == toset([
      "ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel",
    ])
    error_message = "Session Manager needs exactly its agent's registration and channels (no ssm:GetParameter, no documents)"
  }
}

run "without_logs_models_or_session_manager" {
  command = plan
  variables {
    log_group_name    = null
    model_kms_key_arn = null
    session_manager   = false
  }
  assert {
    condition     = length(aws_iam_role_policy.session_manager) == 0 && !strcontains(aws_iam_role_policy.worker.policy, "logs:") && !strcontains(aws_iam_role_policy.worker.policy, "key/models")
    error_message = "grants for what is not there"
  }
}

# A pull-through cache can pull a tag it has not cached: the import and the
# repository's creation, within the rule's prefix alone.
run "pull_through_cache" {
  command = plan
  variables {
    ecr_pull_through_prefixes = ["docker-hub"]
  }
  assert {
    condition = one([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : s if s.Sid == "PullThroughCache"]).Resource == "arn:aws:ecr:us-east-1:000000000000:repository/docker-hub/*" && length(setsubtract(
      ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
    flatten([one([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : s.Action if s.Sid == "PullThroughCache"])]))) == 0
    error_message = "the pull-through cache's repositories cannot import a new tag"
  }
  assert {
    condition     = contains(flatten([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : flatten([s.Action])]), "ecr:GetAuthorizationToken")
    error_message = "no ECR login for the pull-through cache"
  }
}

run "pull_through_prefix_refused" {
  command = plan
  variables {
    ecr_pull_through_prefixes = ["Docker Hub"]
  }
  expect_failures = [var.ecr_pull_through_prefixes]
}

# Listing the input bucket is limited to the worker's prefixes.
run "input_listing_limited_to_prefixes" {
  command = plan
  variables {
    input_prefixes = ["uploads/", "backfill/"]
  }
  assert {
    condition     = one([for s in jsondecode(aws_iam_role_policy.worker.policy).Statement : s.Condition.StringLike["s3:prefix"] if s.Sid == "ListInputPrefixes"]) == ["uploads/*", "backfill/*"]
    error_message = "ListBucket on the input bucket is not limited to the worker's prefixes"
  }
}

# Tags: the tags column and its containment index (GIN on PostgreSQL, partial: untagged jobs cost nothing).

import django_jobq.models
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobq', '0005_job_control'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='tags',
            field=models.JSONField(blank=True, help_text='Labels to find the job by (enqueue(tags=["tenant:42"])).', null=True),
        ),
        migrations.AddIndex(
            model_name='job',
            index=django_jobq.models.ContainmentIndex(condition=models.Q(('tags__isnull', False)), fields=['tags'], name='jobq_job_tags', opclasses=['jsonb_path_ops']),
        ),
    ]
